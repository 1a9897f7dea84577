/**
 * Ends the process as plain Node would for the app: the exit code it set is the
 * process's, and its `'beforeExit'` listeners run first. Exiting 0 over them
 * would report a failed shutdown as clean.
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

export function failingExitCode(): number | undefined {
	const code = appExitCode();
	return code === undefined || !isFailingCode(code) ? undefined : code;
}

/**
 * A failing code set before the drain began (an error handler's `process.exitCode = 1`
 * hours earlier) is not the shutdown's verdict: it is logged and cleared.
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

export function exitOurselves(code: number): never {
	exitingOurselves = true;
	process.exit(code);
}

/**
 * Logs what in the app's shutdown asked for a failing exit: a hook (or listener) that
 * set `process.exitCode` in `around`, or a `process.exit(n)` while it ran.
 */
export class ExitWatch {
	private running: string | undefined;
	/** The exit code when `running` began: a failing one was named already, and is not its doing. */
	private codeBefore: number | undefined;
	private readonly onExit = (code: number): void => {
		if (this.running !== undefined && !exitingOurselves && isFailingCode(code) && code !== this.codeBefore) {
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
		this.codeBefore = appExitCode();
	}

	async around<T>(name: string, run: () => Promise<T>): Promise<T> {
		const before = appExitCode();
		this.running = name;
		this.codeBefore = before;
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
 * Resolves when the event loop would end (Node emits `'beforeExit'` again) or after
 * `ms`, since an app that keeps a pool or timer open never lets it end.
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
 * Calls the app's `'beforeExit'` listeners as Node does (in order, with the exit
 * code) and waits for their promises, then up to `settleMs` for what they started
 * without one. A listener that fails is logged and told to `onFailure`.
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
