#!/usr/bin/env node
/**
 * The `graceful-cluster` command: a shim that holds the signals before anything
 * else loads. Loading the primary's modules takes tens of milliseconds (yargs a
 * hundred more), and a SIGTERM then would kill the primary, or as PID 1 be
 * dropped (the kernel ignores a signal PID 1 has no handler for) and the pod
 * run on until SIGKILL. A plain `--version` or `--help` is answered without
 * loading any of it (print-only.ts).
 */
import {setImmediate} from 'node:timers/promises';
import {ExitCode} from './exit-codes.js';
import {printOnly} from './print-only.js';
import {own, SignalGuard} from './own-signals.js';
import {HANDLED_SIGNALS} from './signals.js';

// Before our own: what is on these signals now is a preload's (own-signals.ts).
const guard = new SignalGuard(HANDLED_SIGNALS);
const early: NodeJS.Signals[] = [];
const hold = own((signal: NodeJS.Signals): void => {
	early.push(signal);
});

for (const signal of HANDLED_SIGNALS) {
	process.on(signal, hold);
}

const printed = printOnly(process.argv.slice(2), process.env);
if (printed !== undefined) {
	process.stdout.write(`${printed}\n`);
	process.exit(ExitCode.OK);
}

/** A main file that loaded without its `main`: cut short at a statement's end (CommonJS runs what is there). */
class NoMain extends Error {}

/** What says for sure that the main file is missing or cut short, whatever the file's own code then threw. */
const isLoadError = (error: unknown): boolean =>
	['ERR_MODULE_NOT_FOUND', 'MODULE_NOT_FOUND'].includes((error as NodeJS.ErrnoException).code ?? '') || error instanceof SyntaxError || error instanceof NoMain;

// main() ends the process itself (process.exit); an event loop that runs dry
// before it did is a bug of ours, which this chain would otherwise exit 0 on.
process.once('beforeExit', () => {
	process.stderr.write('graceful-cluster: the primary stopped before it finished; please report this at https://github.com/graceful-cluster/graceful-cluster/issues\n');
	process.exit(ExitCode.INTERNAL);
});

// A promise chain, not top-level await: the bundle is CommonJS (scripts/bundle.js).
void import('./main.js').then(loaded => {
	if (typeof loaded.main !== 'function') {
		throw new NoMain('the primary\'s main file holds no main()');
	}

	return loaded.main;
}).catch(async (error: unknown) => {
	// Cut short at a statement's end, main.cjs can throw anything as it loads:
	// the file list says whether the install is whole.
	const damaged = await import('./install-check.js')
		.then(({damagedFiles}) => damagedFiles(new URL('graceful-cluster-files.json', import.meta.url)), () => []);
	if (damaged.length > 0 || isLoadError(error)) {
		process.stderr.write(`graceful-cluster: its installation is incomplete, so nothing was started: ${damaged.length > 0 ? damaged.join('; ') : String(error)}. Reinstall graceful-cluster with its dependencies (npm ci).\n`);
		process.exit(ExitCode.INCOMPLETE_INSTALL);
	}

	throw error;
}).then(async main => {
	// The bundle loads main.cjs in one synchronous step, where no signal is
	// handled: one turn of the event loop hands what arrived meanwhile to `hold`,
	// so that the primary acts on it before it starts any worker.
	await setImmediate();
	return main({
		early,
		guard,
		release() {
			for (const signal of HANDLED_SIGNALS) {
				guard.release(signal, hold);
			}
		},
	});
});
