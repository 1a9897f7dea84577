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
import {setImmediate} from 'node:timers/promises';
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

/** A main file that loaded without its `main`: cut short at a statement's end (CommonJS loads what is there). */
class NoMain extends Error {}

// A promise chain, not top-level await: the bundle is CommonJS (scripts/bundle.js).
void import('./main.js').then(loaded => {
	if (typeof loaded.main !== 'function') {
		throw new NoMain('the primary\'s main file holds no main()');
	}

	return loaded;
}).catch(async (error: unknown) => {
	if ((error as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' || (error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' || error instanceof SyntaxError || error instanceof NoMain) {
		const damaged = await import('./install-check.js')
			.then(({damagedFiles}) => damagedFiles(new URL('graceful-cluster-files.json', import.meta.url)), () => []);
		process.stderr.write(`graceful-cluster: its installation is incomplete, so nothing was started: ${damaged.length > 0 ? damaged.join('; ') : String(error)}. Reinstall graceful-cluster with its dependencies (npm ci).\n`);
		process.exit(ExitCode.INCOMPLETE_INSTALL);
	}

	throw error;
}).then(async ({main}) => {
	// The bundle loads main.cjs in one synchronous step, where no signal is
	// handled: one turn of the event loop hands what arrived meanwhile to `hold`,
	// so that the primary acts on it before it starts any worker.
	await setImmediate();
	return main({
		early,
		release() {
			for (const signal of HANDLED_SIGNALS) {
				process.off(signal, hold);
			}
		},
	});
});
