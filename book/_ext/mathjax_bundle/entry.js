// The book's MathJax (book/_ext/offline_mathjax.py): MathJax 3.2.2's tex-chtml component without its
// context menu and assistive MathML, compiled from MathJax's TypeScript for ES2019 browsers (the
// published es5 build carries ES5 class and iterator helpers: 754 kB for the same components).
import 'mathjax-full/components/src/startup/init.js';
import './preload.js';
import 'mathjax-full/components/src/core/core.js';
import 'mathjax-full/components/src/input/tex/tex.js';
import 'mathjax-full/components/src/output/chtml/chtml.js';
import 'mathjax-full/components/src/output/chtml/fonts/tex/tex.js';
import 'mathjax-full/components/src/startup/startup.js';
