import sys

from attnref.audit.cli import main

sys.exit(main())
