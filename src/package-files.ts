/**
 * The package's own files that the primary finds at run time, by URL from this
 * module. It sits at src/'s root because the path from here is the same in the
 * compiled tree (dist/src/) and in the bundle (dist/bundle/, scripts/bundle.js).
 */
import {existsSync} from 'node:fs';
import {fileURLToPath} from 'node:url';

export const PACKAGE_JSON = new URL('../../package.json', import.meta.url);

/** `--help` as yargs prints it, written by the build (scripts/write-help.js); absent after a plain `tsc`. */
export const HELP_FILE = new URL('help.txt', import.meta.url);

/** The bundle's list of its files and their sizes (install-check.ts); absent in the compiled tree. */
export const FILES_JSON = new URL('graceful-cluster-files.json', import.meta.url);

/**
 * How every worker is started (`node <these> app.js`): the bundle's one
 * CommonJS bootstrap with `--require` (scripts/bundle.js says why); the
 * compiled tree has it as an ES module only, hence `--import` there.
 */
export function bootstrapPreload(): [flag: '--require' | '--import', bootstrap: string] {
	const bundled = new URL('worker/bootstrap.cjs', import.meta.url);
	return existsSync(bundled) ? ['--require', fileURLToPath(bundled)] : ['--import', new URL('worker/bootstrap.js', import.meta.url).href];
}
