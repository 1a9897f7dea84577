#!/usr/bin/env node
/**
 * The `graceful-cluster` command. A shim with one job of its own: hold the
 * signals before anything else loads. Loading the primary's modules takes
 * tens of milliseconds (yargs, when it is needed, a hundred more), and a
 * SIGTERM in that time would kill the primary (as PID 1 it would be dropped:
 * the kernel ignores a signal PID 1 has no handler for, and the pod would run
 * on until SIGKILL). The signals held here are
 * handed to the primary once it exists (main.ts). And one shortcut: a plain
 * `--version` or `--help` is answered without loading any of it (print-only.ts).
 */
import {ExitCode} from './exit-codes.js';
import {printOnly} from './print-only.js';
import {HANDLED_SIGNALS} from './signals.js';

const early: NodeJS.Signals[] = [];
const hold = (signal: NodeJS.Signals): void => {
	early.push(signal);
};

for (const signal of HANDLED_SIGNALS) {
	process.on(signal, hold);
}

const printed = printOnly(process.argv.slice(2), process.env);
if (printed !== undefined) {
	process.stdout.write(`${printed}\n`);
	process.exit(ExitCode.OK);
}

const {main} = await import('./main.js').catch(async (error: unknown) => {
	// A file of the bundle missing or cut short (part of dist/ copied): main.ts's
	// own check (install-check.ts) cannot run without it, so it runs here, to
	// name the file (a SyntaxError does not). Only our own modules load here,
	// and as built they do parse.
	if ((error as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' || error instanceof SyntaxError) {
		// The list's URL from here (package-files.ts's FILES_JSON, the same place):
		// importing that module here would cost a plain --version a file more.
		const damaged = await import('./install-check.js')
			.then(({damagedFiles}) => damagedFiles(new URL('graceful-cluster-files.json', import.meta.url)), () => []);
		process.stderr.write(`graceful-cluster: its installation is incomplete, so nothing was started: ${damaged.length > 0 ? damaged.join('; ') : String(error)}. Reinstall graceful-cluster with its dependencies (npm ci).\n`);
		process.exit(ExitCode.INCOMPLETE_INSTALL);
	}

	throw error;
});
await main({
	early,
	release() {
		for (const signal of HANDLED_SIGNALS) {
			process.off(signal, hold);
		}
	},
});
