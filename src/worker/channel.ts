/**
 * The worker's end of the IPC channel, opened by the bootstrap before the app
 * and found by the drain and the helper (maybe the app's own copy of this
 * package) on a global under a versioned `Symbol.for` key. A drain message that
 * comes before the drain exists is kept; the drain starts late, the time
 * already spent taken off.
 */
import type * as net from 'node:net';
import type {AttachOptions, GracefulHandle} from './attach.js';
import type {DrainableServer} from './filter.js';
import {envelope, parseMessage, TO_WORKER, type LeaveMessage, type MetricsRequestMessage, type ToPrimary, type ToWorker} from '../protocol.js';

/** The primary's instruction to leave: a drain (shutdown) or a retire (reload). The first decides how the worker leaves. */
export interface ReceivedDrain {
	readonly message: LeaveMessage;
	/**
	 * `performance.now()` when the bootstrap read it: that clock, whatever this
	 * copy's clock.ts uses, as a helper of another version reads it so. (The
	 * global, loaded at its first call: in the drain, not at every start.)
	 */
	readonly receivedAt: number;
}

export interface WorkerChannel {
	readonly v: 1;
	readonly workerId: number;
	drain: ReceivedDrain | undefined;
	readonly listeners: Set<(drain: ReceivedDrain) => void>;
	send(message: ToPrimary, callback?: () => void): void;
	/** Set by the drain: the request counts the heartbeat carries, once a second; unset (nothing drained), 0. */
	stats: (() => {readonly requests: number; readonly inflight: number}) | undefined;
	/**
	 * The app's metrics, `registry.getMetricsAsJSON()`, set by `attach(server,
	 * {metricsRegistry})` (worker/metrics.ts); undefined: the app gave none, and a
	 * scrape gets `[]` at once. Optional: an older bootstrap's channel lacks it.
	 */
	metrics?: (() => Promise<unknown>) | undefined;
	/** Set by a warming replacement's drain (warmup.ts): the primary's `serve-now`. Optional: an older bootstrap's channel lacks it. */
	serveNow?: (() => void) | undefined;
	/** Set by the drain: the primary's `end-reject` (adaptive reject period). Optional, as `serveNow`. */
	endReject?: (() => void) | undefined;
	/** Set by the drain: the primary's `report-now` (the adaptive rule's last look). */
	reportNow?: ((id: number) => void) | undefined;
	/** Set by the drain: a drain message after the retire this worker acts on (a shutdown during a reload). Optional, as `serveNow`. */
	drainWhileRetiring?: ((drain: ReceivedDrain) => void) | undefined;
	/**
	 * Set by the bootstrap: the process's one drain takes `server` (attach.ts
	 * `Attachments.attach`), whichever copy of the helper the app calls.
	 * Optional: an older bootstrap's channel lacks it, and the helper drains
	 * with a drain of its own.
	 */
	attach?: ((server: DrainableServer, options?: AttachOptions) => GracefulHandle) | undefined;
	/** Set by the bootstrap: the app leaves `server` out of the drain (`Attachments.exclude`). Optional, as `attach`. */
	exclude?: ((server: net.Server) => void) | undefined;
}

/**
 * The signal a leave answers: the one the primary received (in the message),
 * else, for a drain, the one this worker received itself, else SIGTERM (a
 * recycle's retire carries none: the worker is stopped, as an orchestrator
 * stops it).
 */
export function leaveSignal(message: LeaveMessage, receivedHere: NodeJS.Signals | undefined): NodeJS.Signals {
	return (message.signal as NodeJS.Signals | undefined) ?? (message.type === 'drain' ? receivedHere : undefined) ?? 'SIGTERM';
}

const KEY = Symbol.for('graceful-cluster.worker-channel.v1');

export function getChannel(): WorkerChannel | undefined {
	return (globalThis as Record<symbol, WorkerChannel | undefined>)[KEY];
}

/** What the bootstrap does with the messages that are not a leave. */
export interface ChannelHandlers {
	/** One of ours, malformed: the reason, for the log. */
	invalid(reason: string): void;
	/** A scrape wants the app's metrics (worker/metrics.ts answers). */
	metricsRequest(channel: WorkerChannel, message: MetricsRequestMessage): void;
}

/**
 * Opens the channel; called by the bootstrap only. Foreign messages (the app's)
 * are left to the app's own `'message'` listeners.
 */
export function openChannel(workerId: number, handlers: ChannelHandlers): WorkerChannel {
	const channel: WorkerChannel = {
		v: 1,
		workerId,
		drain: undefined,
		listeners: new Set(),
		stats: undefined,
		send(message, callback) {
			if (process.connected && process.send) {
				process.send(envelope(message), undefined, undefined, callback ? () => callback() : undefined);
			} else {
				callback?.();
			}
		},
	};
	process.on('message', (raw: unknown) => {
		const parsed = parseMessage<ToWorker>(raw, TO_WORKER);
		if (parsed.kind === 'invalid') {
			handlers.invalid(parsed.reason);
			return;
		}

		if (parsed.kind !== 'ours') {
			return;
		}

		const {message} = parsed;
		if (message.type === 'metrics-request') {
			handlers.metricsRequest(channel, message);
		} else if (message.type === 'serve-now') {
			channel.serveNow?.();
		} else if (message.type === 'end-reject') {
			channel.endReject?.();
		} else if (message.type === 'report-now') {
			channel.reportNow?.(message.id);
		} else if (channel.drain === undefined) {
			const drain = {message, receivedAt: performance.now()};
			channel.drain = drain;
			for (const listener of channel.listeners) {
				listener(drain);
			}
		} else if (message.type === 'drain' && channel.drain.message.type === 'retire') {
			// A shutdown while this worker retires: it goes on retiring (worker/drain.ts `drainWhileRetiring`).
			channel.drainWhileRetiring?.({message, receivedAt: performance.now()});
		}
	});
	(globalThis as Record<symbol, WorkerChannel>)[KEY] = channel;
	return channel;
}
