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

/** Whether `code` says a shutdown failed: not 0, not 128 + a stop signal, as the OS sees it (256 is 0). */
export const isFailingCode = (code: number): boolean => !isCleanShutdownCode(((code % 256) + 256) % 256);

/** The code the app set, when it says the shutdown failed. */
export function failingExitCode(): number | undefined {
	const code = appExitCode();
	return code === undefined || !isFailingCode(code) ? undefined : code;
}

/**
 * A failing code the app set before the drain began (an error handler's
 * `process.exitCode = 1` hours earlier) is not its shutdown's verdict: it is
 * said, and cleared, so that the drain's own verdict stands. `atDrain`: the
 * code when the drain began.
 */
export function clearCodeSetBefore(atDrain: number | undefined, logger: Logger): void {
	const code = failingExitCode();
	if (code !== undefined && code === atDrain) {
		logger.warn({exitCode: code}, 'the app had set process.exitCode before the drain, not in its shutdown: not counted; the process exits with the drain\'s own verdict');
		process.exitCode = 0;
	}
}

/** Set when graceful-cluster itself exits (a deadline, a second signal): that code is not the app's. */
let exitingOurselves = false;

/** Exits with one of graceful-cluster's own codes. */
export function exitOurselves(code: number): never {
	exitingOurselves = true;
	process.exit(code);
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
		if (this.running !== undefined && !exitingOurselves && isFailingCode(code)) {
			this.logger.error({hook: this.running, exitCode: code}, 'the app\'s shutdown exited with a failing code');
		}
	};

	constructor(private readonly logger: Logger) {
		// Ahead of the hosts' own 'exit' listeners, which log `drain finished`.
		process.prependListener('exit', this.onExit);
	}

	/** What runs from now to the exit: listeners nothing awaits (the basic drain's), or those of a process that ends by itself. */
	blame(name: string): void {
		this.running = name;
	}

	async around<T>(name: string, run: () => Promise<T>): Promise<T> {
		const before = appExitCode();
		this.running = name;
		try {
			return await run();
		} finally {
			this.running = undefined;
			const code = failingExitCode();
			if (code !== undefined && code !== before && !exitingOurselves) {
				this.logger.error({hook: name, exitCode: code}, 'the app\'s shutdown set a failing exit code (process.exitCode)');
			}
		}
	}

	stop(): void {
		process.removeListener('exit', this.onExit);
	}
}

/** Where the app's `'beforeExit'` listeners are: the process's (a test passes its own). */
// eslint-disable-next-line @typescript-eslint/no-unsafe-function-type -- what process.rawListeners() gives
export type ExitListeners = () => readonly Function[];

export const processExitListeners: ExitListeners = () => process.rawListeners('beforeExit');

/** The listeners, named for the log. */
// eslint-disable-next-line @typescript-eslint/no-unsafe-function-type -- what process.rawListeners() gives
function named(listeners: readonly Function[]): Array<{name: string; listener: (...args: unknown[]) => unknown}> {
	return listeners.map(raw => {
		// A `once()` listener comes wrapped; the wrapper removes itself when called.
		const named = (raw as {listener?: {name?: string}}).listener ?? raw;
		return {name: `beforeExit listener${named.name ? ` ${named.name}` : ''}`, listener: raw as (...args: unknown[]) => unknown};
	});
}

/** After them, what they started without a promise (a callback's flush) gets up to this long, until the event loop would end. */
export const EXIT_SETTLE_MS = 1000;

/**
 * Resolves when the event loop would end (Node emits `'beforeExit'`, calling
 * the app's listeners again as it would) or after `ms`: an app that keeps a
 * pool or a timer open never lets it end. The IPC channel is unref'd meanwhile.
 */
async function settle(ms: number): Promise<void> {
	const {channel} = process;
	channel?.unref();
	try {
		await new Promise<void>(resolve => {
			const done = (): void => {
				clearTimeout(timer);
				process.removeListener('beforeExit', done);
				resolve();
			};

			const timer = setTimeout(done, ms).unref();
			process.on('beforeExit', done);
		});
	} finally {
		channel?.ref();
	}
}

/**
 * Calls the app's `'beforeExit'` listeners as Node does when the event loop
 * empties (in order, at once, with the exit code), and resolves once the
 * promises they return settle, and what they started otherwise has had
 * `settleMs` to finish (`settle`). Each that throws or rejects is logged and
 * told to `onFailure`, as a hook's failure.
 */
export async function runExitCleanup(source: ExitListeners, logger: Logger, onFailure: (name: string) => Promise<void>, settleMs = 0): Promise<void> {
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
	if (settleMs > 0) {
		await settle(settleMs);
	}
}
