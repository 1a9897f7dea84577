/**
 * The app's entry script as the command line names it: its absolute path, or a
 * `UsageError` that says what to pass instead. A directory gets the entry file
 * it most likely holds named in the message; a name that looks like a script
 * is how args.ts tells that an option took the script as its value.
 */
import {readdirSync, readFileSync, statSync} from 'node:fs';
import path from 'node:path';
import {UsageError} from './errors.js';

export const looksLikeScript = (value: string, cwd: string): boolean =>
	/\.(?:[cm]?[jt]s|[jt]sx)$/i.test(value) || isFile(path.resolve(cwd, value));

function isFile(file: string): boolean {
	try {
		return statSync(file).isFile();
	} catch {
		return false;
	}
}

function isDirectory(file: string): boolean {
	try {
		return statSync(file).isDirectory();
	} catch {
		return false;
	}
}

const ENTRY_FILES = ['server.js', 'server.mjs', 'server.cjs', 'index.js', 'index.mjs', 'index.cjs', 'app.js', 'app.mjs', 'app.cjs', 'main.js'];

function entryFileIn(dir: string): string | undefined {
	try {
		const main = (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {main?: unknown}).main;
		if (typeof main === 'string' && isFile(path.join(dir, main))) {
			return path.normalize(main);
		}
	} catch {}

	let names: string[];
	try {
		names = readdirSync(dir);
	} catch {
		return undefined;
	}

	return ENTRY_FILES.find(name => names.includes(name));
}

/** `swallowed`: the better explanation, when there is one, that an option took the real script as its value (args.ts knows the options). */
export function resolveScript(script: string, cwd: string, swallowed: () => UsageError | undefined): string {
	const scriptPath = path.resolve(cwd, script);
	if (isFile(scriptPath)) {
		return scriptPath;
	}

	if (isDirectory(scriptPath)) {
		const entry = entryFileIn(scriptPath);
		const example = path.join(script, entry ?? 'server.js');
		throw new UsageError(`Script ${script} is a directory: pass the app's entry file (e.g. ${example}${entry === undefined ? '' : ', which is in it'}).`);
	}

	throw swallowed()
		?? new UsageError(`Script not found: ${script} (looked for ${scriptPath}). Pass the path of your server's entry file, after the options.`);
}
