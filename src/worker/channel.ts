/**
 * The worker's end of the IPC channel, opened by the bootstrap before the app and
 * found by the drain and the helper (maybe the app's own copy of this package) on a
 * global under a versioned `Symbol.for` key. A drain message that comes before the
 * drain exists is kept; the drain starts late, the time already spent taken off.
 */
import type * as net from 'node:net';
import type {AttachOptions, GracefulHandle} from './handle.js';
import type {DrainableServer} from './filter.js';
import {envelope, parseMessage, TO_WORKER, type HeartbeatMessage, type LeaveMessage, type MetricsRequestMessage, type ToPrimary, type ToWorker} from '../protocol.js';

/** The first leave message decides how the worker leaves. */
export interface ReceivedDrain {
	readonly message: LeaveMessage;
	/** `performance.now()`, whatever this copy's clock.ts uses: a helper of another version reads it so. */
	readonly receivedAt: number;
}

export interface WorkerChannel {
	readonly v: 1;
	readonly workerId: number;
	drain: ReceivedDrain | undefined;
	readonly listeners: Set<(drain: ReceivedDrain) => void>;
	send(message: ToPrimary, callback?: () => void): void;
	/** Set by the drain: the request counts the heartbeat carries; unset (nothing drained), 0. */
	stats: (() => WorkerStats) | undefined;
	/** Set by the drain with `--max-event-loop-delay`: each 100 ms sample of the event loop's lateness. */
	loopSample?: ((lateMs: number) => void) | undefined;
	/** The primary's `shedding` message: whether every worker sheds. */
	everyWorkerSheds?: ((all: boolean) => void) | undefined;
	/**
	 * The optional members are set by the drain or the bootstrap; a channel made by an
	 * older bootstrap (another installed copy) lacks them. `metrics` unset: the app gave
	 * no registry, and a scrape gets `[]` at once.
	 */
	metrics?: (() => Promise<unknown>) | undefined;
	serveNow?: (() => void) | undefined;
	endReject?: (() => void) | undefined;
	reportNow?: ((id: number) => void) | undefined;
	/** A shutdown during a reload, after the retire this worker acts on. */
	drainWhileRetiring?: ((drain: ReceivedDrain) => void) | undefined;
	/** The process's one drain takes `server`, whichever copy of the helper the app calls; unset, the helper drains with a drain of its own. */
	attach?: ((server: DrainableServer, options?: AttachOptions) => GracefulHandle) | undefined;
	exclude?: ((server: net.Server) => void) | undefined;
}

/** What the heartbeat carries of the drain's counts (protocol.ts `HeartbeatMessage`). */
export type WorkerStats = Pick<HeartbeatMessage, 'requests' | 'inflight' | 'connectionsAged' | 'shed' | 'sheddingMs' | 'shedding'>;

/** The primary's signal, else for a drain the one this worker received, else SIGTERM (a recycle's retire carries none). */
export function leaveSignal(message: LeaveMessage, receivedHere: NodeJS.Signals | undefined): NodeJS.Signals {
	return (message.signal as NodeJS.Signals | undefined) ?? (message.type === 'drain' ? receivedHere : undefined) ?? 'SIGTERM';
}

const KEY = Symbol.for('graceful-cluster.worker-channel.v1');

export function getChannel(): WorkerChannel | undefined {
	return (globalThis as Record<symbol, WorkerChannel | undefined>)[KEY];
}

export interface ChannelHandlers {
	invalid(reason: string): void;
	metricsRequest(channel: WorkerChannel, message: MetricsRequestMessage): void;
}

/** Foreign messages (the app's) are left to the app's own `'message'` listeners. */
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
		} else if (message.type === 'shedding') {
			channel.everyWorkerSheds?.(message.all);
		} else if (channel.drain === undefined) {
			const drain = {message, receivedAt: performance.now()};
			channel.drain = drain;
			for (const listener of channel.listeners) {
				listener(drain);
			}
		} else if (message.type === 'drain' && channel.drain.message.type === 'retire') {
			// A shutdown while this worker retires: it goes on retiring.
			channel.drainWhileRetiring?.({message, receivedAt: performance.now()});
		}
	});
	(globalThis as Record<symbol, WorkerChannel>)[KEY] = channel;
	return channel;
}
