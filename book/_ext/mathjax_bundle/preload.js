// The components the book's MathJax bundle holds (nothing of them is fetched again by the loader).
import {Loader} from 'mathjax-full/js/components/loader.js';

Loader.preLoad('loader', 'startup', 'core', 'input/tex', 'output/chtml', 'output/chtml/fonts/tex.js');
