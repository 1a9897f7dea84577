/**
 * The app's own shutdown: the stop-signal listeners it registered (held by
 * signal-listeners.ts), called after the `onShutdown` hooks. A listener usually
 * starts its work and returns nothing (`server.close(() => pool.end())`), so the
 * process waits, as plain Node would after a handled signal, for the first of: the
 * app calls `process.exit()`; the event loop would end (`'beforeExit'`); the app
 * re-raises the signal with no listener left (terminus and NestJS do); the deadline.
 * A SIGHUP listener alone (a reload's retiring worker calls it) is not waited for.
 */
import type {Logger} from '../logger.js';
import type {DrainReason} from './long-lived.js';
import {callListeners, endsProcess, isStopListener, listenerName, listenersFor, type SignalListeners} from './signal-listeners.js';

/** 'idle': the app's work is done; 'self-signal': it re-raised its signal and expects to end; 'called': no stop listener, nothing to wait for. */
export type AppShutdownEnd = 'idle' | 'self-signal' | 'called';

/** The first "still waiting" line after this long, then one every WAITING_LOG_MS. */
const FIRST_WAITING_LOG_MS = 1000;
export const WAITING_LOG_MS = 5000;

export interface AppShutdown {
	/** True when the app has listeners to call for `signal` (received for a shutdown, or a reload's retirement). */
	has(signal: NodeJS.Signals, reason: DrainReason): boolean;
	names(signal: NodeJS.Signals, reason: DrainReason): string[];
	/** Resolves once the app's shutdown is over; `onFailure` hears of each listener that failed. */
	run(signal: NodeJS.Signals, reason: DrainReason, onFailure: (name: string) => Promise<void>): Promise<AppShutdownEnd>;
}

/**
 * The resource types keeping the process alive, less our own stdio pipes. A server
 * the app never closed shows as a `Timeout` in a cluster worker: node:cluster's
 * round-robin keeps one for it.
 */
export function appResources(): Record<string, number> {
	const counts: Record<string, number> = {};
	for (const type of process.getActiveResourcesInfo()) {
		counts[type] = (counts[type] ?? 0) + 1;
	}

	for (const stream of [process.stdout, process.stderr]) {
		const handle = (stream as {_handle?: {constructor?: {name?: string}}})._handle?.constructor?.name;
		const type = handle === 'Pipe' ? 'PipeWrap' : handle === 'TTY' ? 'TTYWrap' : undefined;
		if (type !== undefined && counts[type] !== undefined) {
			counts[type]--;
			if (counts[type] === 0) {
				delete counts[type];
			}
		}
	}

	return counts;
}

export function appShutdown(holder: SignalListeners, logger: Logger): AppShutdown {
	return {
		has: (signal, reason) => listenersFor(holder, signal, {retiring: reason === 'reload'}).length > 0,
		names: (signal, reason) => listenersFor(holder, signal, {retiring: reason === 'reload'}).map(entry => listenerName(entry, signal)),
		async run(signal, reason, onFailure) {
			const entries = listenersFor(holder, signal, {retiring: reason === 'reload'});
			const shutdown = entries.some(entry => isStopListener(holder, entry));
			const failures: Array<Promise<void>> = [];
			let ended: AppShutdownEnd | undefined;
			const selfSignalled = new Promise<void>(resolve => {
				holder.onSelfSignal = sent => {
					if (!endsProcess(holder, sent)) {
						// Node would call the app's listeners again: they ran once, that is all.
						return;
					}

					logger.info({signal: sent}, 'the app signalled itself: its own shutdown is done');
					ended ??= 'self-signal';
					resolve();
				};
			});
			logger.info({listeners: entries.map(entry => listenerName(entry, signal)), signal}, 'running the app\'s own signal listeners');
			const names = callListeners(holder, entries, signal, (name, error) => {
				logger.error({err: error, hook: name}, 'a shutdown hook failed; running the rest');
				failures.push(onFailure(name));
			});
			if (shutdown) {
				const idle = untilIdle(holder, logger, names);
				await Promise.race([selfSignalled, idle.done.then(() => {
					ended ??= 'idle';
				})]);
				idle.stop();
			} else {
				// A turn for what they started at once (a promise's first step).
				await new Promise(resolve => {
					setImmediate(resolve);
				});
			}

			holder.onSelfSignal = undefined;
			// A listener whose promise is still pending now never settles: nothing
			// is left that could settle it, or the app declared itself done.
			await Promise.all(failures);
			return ended ?? 'called';
		},
	};
}

/** Resolves when the event loop would end; our IPC channel is unref'd until then so it does not keep the process alive. */
function untilIdle(holder: SignalListeners, logger: Logger, listeners: readonly string[]): {readonly done: Promise<void>; stop(): void} {
	const startedAt = performance.now();
	const channel = process.channel;
	channel?.unref();
	let onBeforeExit: (() => void) | undefined;
	const done = new Promise<void>(resolve => {
		onBeforeExit = resolve;
	});
	// Ours: the app's removeAllListeners() leaves it in place.
	holder.listenOurselves('beforeExit', onBeforeExit!);
	const log = (): void => {
		logger.info({listeners, open: appResources(), waitingForMs: Math.round(performance.now() - startedAt)}, 'waiting for the app\'s own shutdown to finish');
	};

	let interval: NodeJS.Timeout | undefined;
	const first = setTimeout(() => {
		log();
		interval = setInterval(log, WAITING_LOG_MS).unref();
	}, FIRST_WAITING_LOG_MS).unref();
	return {
		done,
		stop() {
			clearTimeout(first);
			clearInterval(interval);
			process.removeListener('beforeExit', onBeforeExit!);
			channel?.ref();
		},
	};
}
