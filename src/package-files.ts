/**
 * The package's own files that the primary finds at run time, by URL from this
 * module: package.json (the version), help.txt (the prebuilt --help,
 * print-only.ts), the worker bootstrap (primary/index.ts) and the bundle's list of
 * its files (main.ts, install-check.ts).
 *
 * Here, at src/'s root, because the path from here is the same in the compiled
 * tree (dist/src/) and in the bundle the package runs (dist/bundle/,
 * scripts/bundle.js): the bundle puts the CLI's code at its root and the
 * worker's in worker/, as src/ has them, and checks that this module's code
 * landed at the root.
 */
import {existsSync} from 'node:fs';
import {fileURLToPath} from 'node:url';

/** graceful-cluster's package.json, two levels above this file's directory. */
export const PACKAGE_JSON = new URL('../../package.json', import.meta.url);

/** `--help` as yargs prints it, written by the build (scripts/write-help.js); absent after a plain `tsc`. */
export const HELP_FILE = new URL('help.txt', import.meta.url);

/** The bundle's list of its files and their sizes (install-check.ts); absent in the compiled tree. */
export const FILES_JSON = new URL('graceful-cluster-files.json', import.meta.url);

/**
 * How every worker is started (`node <these> app.js`): the bundle's
 * worker/bootstrap.cjs, one CommonJS file, with `--require` (scripts/bundle.js
 * says why). The compiled tree (dist/src/, which the unit tests import and some
 * benches run) has the bootstrap as an ES module only: `--import` there.
 */
export function bootstrapPreload(): [flag: '--require' | '--import', bootstrap: string] {
	const bundled = new URL('worker/bootstrap.cjs', import.meta.url);
	return existsSync(bundled) ? ['--require', fileURLToPath(bundled)] : ['--import', new URL('worker/bootstrap.js', import.meta.url).href];
}
