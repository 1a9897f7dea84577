/**
 * pino, loaded when first asked for (logger.ts).
 *
 * The package runs a bundle (scripts/bundle.js) that holds pino as one
 * CommonJS file beside each entry's chunks, `pino-bundle.cjs`, compiled at the
 * first log line. Compiling pino (some 100 kB) costs a process about 3 ms and
 * reading it about 1 ms, and most workers log nothing until the drain: bundled
 * into the chunks as before, every worker paid both at its start.
 *
 * Its text is read as this module loads, asynchronously (off the main thread,
 * beside the start), or at the first line if that comes sooner: a worker whose
 * first line comes in a drain, long after its release directory was deleted
 * (test/e2e/release-dirs.test.ts), must read nothing from disk then.
 *
 * Without that file (the compiled tree, dist/src/, which the unit tests
 * import), pino comes from node_modules, as any package's would.
 */
import {existsSync, readFile, readFileSync} from 'node:fs';
import path from 'node:path';
import {fileURLToPath, pathToFileURL} from 'node:url';
import type * as Pino from 'pino';

/** The bundle's file name; scripts/bundle.js writes it beside each entry's chunks. */
export const PINO_BUNDLE = 'pino-bundle.cjs';
// Undefined where a bundler put this module into an app's own CommonJS build
// (esbuild leaves `import.meta` empty there): no bundle of ours is beside it,
// and pino comes from the app's node_modules, found from its main script.
const bundled = (import.meta.url as string | undefined) ? new URL(PINO_BUNDLE, import.meta.url) : undefined;
const requireFrom = bundled ?? pathToFileURL(process.argv[1] ?? path.join(process.cwd(), 'index.js'));
/** The bundle's text; null: there is none (dist/src/, an app's build); undefined: not read yet. */
let text: Buffer | null | undefined;
let loaded: typeof Pino.pino | undefined;

const readText = (): Buffer | null => {
	text ??= bundled ? readIfThere(bundled) : null;
	return text;
};

if (bundled) {
	readFile(bundled, (error, data) => {
		// Another error is left to the first line's read, to throw there.
		if (error === null || error.code === 'ENOENT') {
			text ??= error === null ? data : null;
		}
	});
}

export function loadPino(): typeof Pino.pino {
	if (loaded === undefined) {
		const source = readText();
		const requireHere = process.getBuiltinModule('node:module').createRequire(requireFrom);
		loaded = (source === null ? requireHere('pino') as typeof Pino : runCommonJs(source, requireHere) as typeof Pino).pino;
	}

	return loaded;
}

/**
 * Where a logger could not be made: this module's place and `others` (the
 * worker bootstrap's, given by the primary), each as the path of its missing
 * bundle and what is wrong. For a copy of the package without a list of its
 * files (install-check.ts): a worker without pino would serve normally, then
 * throw at its first log line, the drain's, and cut its requests.
 */
export function pinoMissing(others: readonly string[]): string[] {
	const bundles = [...(bundled ? [bundled] : []), ...others.map(href => new URL(PINO_BUNDLE, href))];
	const missing = bundles.filter(url => !existsSync(url) && !resolvesPino(url))
		.map(url => `${fileURLToPath(url)} (missing: pino, its logger, and no pino package resolves from there either)`);
	// Inside an app's own build: from the app, as loadPino() takes it.
	return bundled === undefined && !resolvesPino(requireFrom) ? [`pino, its logger (no pino package resolves from ${fileURLToPath(requireFrom)})`, ...missing] : missing;
}

function resolvesPino(from: URL): boolean {
	try {
		process.getBuiltinModule('node:module').createRequire(from).resolve('pino');
		return true;
	} catch {
		return false;
	}
}

function readIfThere(url: URL): Buffer | null {
	try {
		return readFileSync(url);
	} catch (error) {
		if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
			return null;
		}

		throw error;
	}
}

/** What `require()` does with a CommonJS file, from text already read; `requireHere` serves its require() of Node's modules. */
function runCommonJs(source: Buffer, requireHere: NodeJS.Require): unknown {
	const filename = fileURLToPath(bundled!);
	const {compileFunction} = process.getBuiltinModule('node:vm');
	const wrapper = compileFunction(source.toString(), ['exports', 'require', 'module', '__filename', '__dirname'], {filename});
	const module = {exports: {} as unknown};
	wrapper.call(module.exports, module.exports, requireHere, module, filename, path.dirname(filename));
	return module.exports;
}
