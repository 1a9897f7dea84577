/**
 * The worker helper for CommonJS apps: `require('graceful-cluster/worker')`, and
 * `import {attach} from 'graceful-cluster/worker'` in a TypeScript file compiled
 * to CommonJS (`.cts`, or `"type": "commonjs"`). package.json's `require`
 * condition points here.
 *
 * At run time it hands over the ES module (`index.js`): Node 20.19+ and 22.12+
 * `require()` an ES module that has no top-level await, and both kinds of app
 * then share one instance of it. The reason for this file is its declarations
 * (`index.d.cts`): TypeScript under `module: node16` refuses to let a CommonJS
 * file import declarations that say "ES module" (TS1479), so CommonJS consumers
 * need a CommonJS entry. Its declarations reach the ES module's types only
 * through type-only imports with `resolution-mode: 'import'`, which every mode
 * accepts (TypeScript 5.3+); a plain `export * from './index.js'` would bring
 * TS1479 back inside the declaration file.
 *
 * A value export added to `index.ts` must be added here too:
 * test/e2e/package.test.ts compares the two lists.
 */
import type * as worker from './index.js' with {'resolution-mode': 'import'};

export type * from './index.js' with {'resolution-mode': 'import'};

export const {attach, exclude} = require('./index.js') as typeof worker;
