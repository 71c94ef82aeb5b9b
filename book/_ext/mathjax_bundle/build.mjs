// Rebuild tex-chtml-book.js (see README.md): node build.mjs <folder holding node_modules>
import fs from 'fs';
import path from 'path';
import {createRequire} from 'module';

const modules = path.resolve(process.argv[2] || '.', 'node_modules');
const esbuild = createRequire(path.join(modules, 'x.js'))('esbuild');
const here = path.dirname(new URL(import.meta.url).pathname);
// MathJax's components import its compiled ES5 modules (js/...): read the TypeScript source instead.
const typescript = {name: 'mathjax-typescript', setup(build) {
  build.onResolve({filter: /\.js$/}, (args) => {
    const file = args.path.startsWith('.') ? path.resolve(args.resolveDir, args.path)
      : path.join(modules, args.path);
    const m = file.match(/^(.*\/mathjax-full)\/js\/(.*)\.js$/);
    if (m && fs.existsSync(`${m[1]}/ts/${m[2]}.ts`)) return {path: `${m[1]}/ts/${m[2]}.ts`};
    if (!args.path.startsWith('.') && fs.existsSync(file)) return {path: file};
  });
}};
await esbuild.build({
  entryPoints: [path.join(here, 'entry.js')], bundle: true, minify: true, target: 'es2019', format: 'iife',
  outfile: path.join(here, 'tex-chtml-book.js'), plugins: [typescript], legalComments: 'none',
  // MathJax's own compiler settings: a field a subclass only re-declares keeps its value (assignment semantics)
  tsconfigRaw: {compilerOptions: {useDefineForClassFields: false}},
  nodePaths: [modules], logLevel: 'warning', define: {global: 'window', __dirname: '"/"'},   // as webpack's build does
  banner: {js: '/*! MathJax 3.2.2 (Apache-2.0, https://www.mathjax.org): tex-chtml without menu and assistive MathML, '
    + 'built for attention-claims by book/_ext/mathjax_bundle/build.mjs */'},
});
