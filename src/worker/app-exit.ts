/**
 * The end of a process as the app expects it from plain Node: the exit code it
 * set (`process.exitCode`, `process.exit(n)`) is the process's, and its
 * `'beforeExit'` listeners (Prisma's `$disconnect`, clients that flush when
 * the loop empties) run before the exit. A drain that ended with
 * `process.exit(0)` over them would report a failed shutdown as clean.
 */
import type {Logger} from '../logger.js';
import {isCleanShutdownCode} from '../signals.js';

/** `process.exitCode` as a number (Node also takes an integer string); undefined when unset. */
export function appExitCode(): number | undefined {
	const code = process.exitCode;
	if (code === undefined || code === null || code === '') {
		return undefined;
	}

	const number = Number(code);
	return Number.isInteger(number) ? number : undefined;
}

/** The code the app set, when it says the shutdown failed (not 0, not 128 + a stop signal). */
export function failingExitCode(): number | undefined {
	const code = appExitCode();
	return code === undefined || isCleanShutdownCode(code) ? undefined : code;
}

/**
 * Names, in the log, what in the app's shutdown asked for a failing exit:
 * `around` runs one hook (or the app's listeners) and says so if it set
 * `process.exitCode`; a `process.exit(n)` while it runs is said at the exit.
 * The count is the exit code's: the primary counts a worker's failing exit,
 * standalone exits with it.
 */
export class ExitWatch {
	private running: string | undefined;
	private readonly onExit = (code: number): void => {
		if (this.running !== undefined && !isCleanShutdownCode(code)) {
			this.logger.error({hook: this.running, exitCode: code}, 'the app\'s shutdown exited with a failing code');
		}
	};

	constructor(private readonly logger: Logger) {
		process.on('exit', this.onExit);
	}

	async around<T>(name: string, run: () => Promise<T>): Promise<T> {
		const before = appExitCode();
		this.running = name;
		try {
			return await run();
		} finally {
			this.running = undefined;
			const code = failingExitCode();
			if (code !== undefined && code !== before) {
				this.logger.error({hook: name, exitCode: code}, 'the app\'s shutdown set a failing exit code (process.exitCode)');
			}
		}
	}

	stop(): void {
		process.removeListener('exit', this.onExit);
	}
}

/** Where the app's `'beforeExit'` listeners are: the process's (a test passes its own). */
export type ExitListeners = () => readonly Function[];

export const processExitListeners: ExitListeners = () => process.rawListeners('beforeExit');

/** The listeners, named for the log. */
function named(listeners: readonly Function[]): Array<{name: string; listener: (...args: unknown[]) => unknown}> {
	return listeners.map(raw => {
		// A `once()` listener comes wrapped; the wrapper removes itself when called.
		const named = (raw as {listener?: {name?: string}}).listener ?? raw;
		return {name: `beforeExit listener${named.name ? ` ${named.name}` : ''}`, listener: raw as (...args: unknown[]) => unknown};
	});
}

/**
 * Calls the app's `'beforeExit'` listeners as Node does when the event loop
 * empties (in order, at once, with the exit code), and resolves once the
 * promises they return settle. Each that throws or rejects is logged and told
 * to `onFailure`, as a hook's failure. Node would call them again if they left
 * work behind; here they run once, and the process exits after them.
 */
export async function runExitCleanup(source: ExitListeners, logger: Logger, onFailure: (name: string) => Promise<void>): Promise<void> {
	const listeners = named(source());
	logger.info({listeners: listeners.map(entry => entry.name)}, 'running the app\'s beforeExit listeners');
	const code = appExitCode() ?? 0;
	await Promise.all(listeners.map(async ({name, listener}) => {
		try {
			await listener.call(process, code);
		} catch (error) {
			logger.error({err: error, hook: name}, 'a shutdown hook failed; running the rest');
			await onFailure(name);
		}
	}));
}
