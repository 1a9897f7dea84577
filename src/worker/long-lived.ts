/**
 * Long-lived connections: upgraded sockets (WebSockets, socket.io) and event
 * streams. They stay open as long as the client likes, so they never hold a drain:
 * they are counted apart, the app is told when the drain starts (`onDrain`), and what
 * is still open when the reject phase ends is closed as cleanly as the protocol
 * allows (a WebSocket close frame; an event stream's end, after which EventSource
 * reconnects elsewhere). Nothing here runs per request.
 */
import type {IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import type {Clock} from '../clock.js';
import type {Logger} from '../logger.js';

/** Why long-lived connections are closed, and the WebSocket close code that says so (RFC 6455 section 7.4.1, IANA registry). */
export type DrainReason = 'shutdown' | 'reload';
export const CLOSE_CODES: Readonly<Record<DrainReason, 1001 | 1012>> = {shutdown: 1001, reload: 1012};

export interface LongLivedClosed {
	readonly upgrades: number;
	readonly streams: number;
}

/** How long closed long-lived connections get to finish closing (a WebSocket's closing handshake) before they are destroyed and counted as cut. */
export const UPGRADE_CLOSE_WAIT_MS = 2000;

interface LongLivedHolder {
	closeLongLived(reason: DrainReason): LongLivedClosed;
	cutLongLived(): LongLivedClosed;
}

function sumOver(filters: Iterable<LongLivedHolder>, each: (filter: LongLivedHolder) => LongLivedClosed): LongLivedClosed {
	let upgrades = 0;
	let streams = 0;
	for (const filter of filters) {
		const counted = each(filter);
		upgrades += counted.upgrades;
		streams += counted.streams;
	}

	return {upgrades, streams};
}

/**
 * One drain's end of the long-lived connections. What has not finished closing
 * `UPGRADE_CLOSE_WAIT_MS` later is cut, destroyed and counted in one step: apart, the
 * first socket's 'close' could read the count before the others were in it.
 */
export class LongLivedEnd {
	closed = 0;
	cut = 0;
	private state: 'open' | 'waiting' | 'over' = 'open';

	constructor(private readonly filters: Iterable<LongLivedHolder>, private readonly logger: Logger) {}

	close(reason: DrainReason, later: (run: () => void, ms: number) => void, over: () => void): void {
		const {upgrades, streams} = sumOver(this.filters, filter => filter.closeLongLived(reason));
		if (upgrades + streams > 0) {
			this.logger.info({upgrades, streams, reason, closeCode: CLOSE_CODES[reason]}, 'closed the long-lived connections still open; the app can close them itself, earlier, in handle.onDrain()');
		}

		this.closed += upgrades + streams;
		this.state = 'waiting';
		later(() => {
			this.state = 'over';
			this.cutAll();
			over();
		}, UPGRADE_CLOSE_WAIT_MS);
	}

	/** True when no long-lived connection is left, or their wait is over (those found since are cut too): never cut one mid-frame before then. */
	settled(open: number): boolean {
		if (open === 0) {
			return true;
		}

		if (this.state !== 'over') {
			return false;
		}

		this.cutAll();
		return true;
	}

	private cutAll(): void {
		const {upgrades, streams} = sumOver(this.filters, filter => filter.cutLongLived());
		if (upgrades + streams > 0) {
			this.logger.warn({upgrades, streams, waitedMs: UPGRADE_CLOSE_WAIT_MS}, 'long-lived connections did not finish closing in time; destroying them');
		}

		this.cut += upgrades + streams;
	}
}

const EVENT_STREAM = /^\s*text\/event-stream/i;
const EVENT_STREAM_HEADER = /\r\ncontent-type:[ \t]*text\/event-stream/i;

export function isEventStreamResponse(response: ServerResponse): boolean {
	const type = response.getHeader('content-type');
	if (type !== undefined) {
		return typeof type === 'string' && EVENT_STREAM.test(type);
	}

	// `writeHead(status, {...})` without an earlier `setHeader` sends its headers without storing them.
	const header = (response as {_header?: unknown})._header;
	return typeof header === 'string' && EVENT_STREAM_HEADER.test(header);
}

/** Header names may be in any case on the HTTP/2 `'stream'` API. */
export function isEventStreamHeaders(sent: OutgoingHttpHeaders | undefined): boolean {
	for (const name in sent) {
		if (name.toLowerCase() === 'content-type') {
			const type = sent[name];
			return typeof type === 'string' && EVENT_STREAM.test(type);
		}
	}

	return false;
}

export function wantsEventStream(headers: IncomingHttpHeaders): boolean {
	const {accept} = headers;
	return accept !== undefined && accept.includes('text/event-stream');
}

/**
 * The body of the 200 that ends at once, for a new event stream that must go
 * elsewhere: a 503 would make EventSource give up for good (WHATWG: any non-200
 * fails the connection), an ended 200 makes it reconnect after `retryMs`.
 */
export function eventStreamRetryBody(retryMs: number): Buffer {
	return Buffer.from(`retry: ${retryMs}\n\n`);
}

/**
 * The `retry:` a retiring worker gives a new event stream: the pod's other workers
 * serve, so the reconnect may come at once. Not 0: EventSource keeps the value for
 * the rest of its life (WHATWG "reconnection time"), so a later outage would meet a
 * reconnect loop. 250 ms is unnoticeable next to the browsers' defaults (3 s in
 * Chromium, 5 s in Firefox, which raises anything under 500 ms to 500).
 */
export const RETIRE_RETRY_MS = 250;

/** Server-to-client (unmasked): FIN + opcode 8, the code, a short reason. */
function closeFrame(code: number, reason: string): Buffer {
	const text = Buffer.from(reason);
	return Buffer.concat([Buffer.from([0x88, 2 + text.length, code >> 8, code & 0xFF]), text]);
}

const CLOSE_FRAMES: Readonly<Record<DrainReason, Buffer>> = {
	shutdown: closeFrame(CLOSE_CODES.shutdown, 'server shutting down'),
	reload: closeFrame(CLOSE_CODES.reload, 'server restarting'),
};

export function ignoreError(): void {}

/**
 * An event stream the drain ended while the app still writes to it on a timer: Node
 * reports each write as an `ERR_STREAM_WRITE_AFTER_END` error event, which would crash
 * a worker whose app has no listener for it. Only that error is taken here.
 */
export function endOwnedStream(stream: NodeJS.EventEmitter & {end(): unknown}): void {
	stream.on('error', function onError(this: NodeJS.EventEmitter, error: Error & {code?: string}) {
		if (error.code !== 'ERR_STREAM_WRITE_AFTER_END' && this.listenerCount('error') === 1) {
			throw error;
		}
	});
	stream.end();
}

export class Upgrades {
	private readonly open = new Map<Socket, boolean>();

	constructor(private readonly onClosed: () => void) {}

	private closing = false;

	get size(): number {
		return this.open.size;
	}

	track(request: IncomingMessage, socket: Socket): void {
		const upgrade = request.headers.upgrade;
		this.open.set(socket, upgrade !== undefined && upgrade.toLowerCase() === 'websocket');
		socket.once('close', () => {
			this.open.delete(socket);
			if (this.closing) {
				this.onClosed();
			}
		});
	}

	/** A WebSocket gets a close frame with the reason's code; its library and the client have until `cut()` to finish the handshake. */
	close(reason: DrainReason): number {
		this.closing = true;
		for (const [socket, webSocket] of this.open) {
			sendCloseFrame(socket, webSocket ? CLOSE_FRAMES[reason] : undefined);
		}

		return this.open.size;
	}

	/** They leave `size` at once, not at their later `'close'`, so each is counted once, as cut, never again as still open. */
	cut(): number {
		const sockets = [...this.open.keys()];
		this.open.clear();
		for (const socket of sockets) {
			socket.destroy();
		}

		return sockets.length;
	}
}

/**
 * A WebSocket gets `frame` if the handshake answer went out and it is still
 * writable: libraries write whole frames in one go, and a control frame may come
 * between a message's fragments (RFC 6455 section 5.4), so it lands on a boundary.
 * Anything else is destroyed now.
 */
function sendCloseFrame(socket: Socket, frame: Buffer | undefined): void {
	if (frame === undefined || !socket.writable || socket.writableEnded || socket.bytesWritten === 0) {
		socket.destroy();
		return;
	}

	socket.on('error', ignoreError);
	socket.write(frame);
}

/** What an `onDrain` listener is told, once, when the drain starts or a reload retires the worker. */
export interface DrainNotice {
	/** `'shutdown'`: the process is going away (SIGTERM); `'reload'`: replaced by a new worker. */
	readonly reason: DrainReason;
	/**
	 * Milliseconds from this call until graceful-cluster closes the upgraded
	 * connections and event streams still open (the end of the reject phase; a
	 * reload's linger). Close yours before then, spread out if you like.
	 */
	readonly closeInMs: number;
	/** The WebSocket close code that fits the reason: 1001 (going away) or 1012 (service restart). */
	readonly closeCode: 1001 | 1012;
}

export type DrainListener = (notice: DrainNotice) => unknown;

/**
 * An `onDrain` listener that runs this long has held the event loop: requests and
 * the drain's own timers waited. Logged once per listener, as the likely cause of
 * what follows.
 */
export const BLOCKING_LISTENER_MS = 500;

/** Each listener is told once: when the drain starts, or on the next tick if added after. One that fails is logged, never fatal. */
export class DrainNotices {
	private readonly listeners: DrainListener[] = [];
	private closing: {readonly reason: DrainReason; readonly at: number} | undefined;

	constructor(private readonly clock: Clock, private readonly logger: Logger) {}

	get reason(): DrainReason | undefined {
		return this.closing?.reason;
	}

	add(listener: DrainListener): void {
		if (typeof listener !== 'function') {
			throw new TypeError('graceful-cluster: onDrain() takes a function.');
		}

		this.listeners.push(listener);
		if (this.closing) {
			setImmediate(() => {
				this.notify(listener);
			});
		}
	}

	start(reason: DrainReason, closeAt: number): void {
		this.closing = {reason, at: closeAt};
		for (const listener of this.listeners) {
			this.notify(listener);
		}
	}

	private notify(listener: DrainListener): void {
		const {reason, at} = this.closing!;
		const notice: DrainNotice = {reason, closeInMs: Math.max(0, Math.round(at - this.clock.now())), closeCode: CLOSE_CODES[reason]};
		const failed = (error: unknown): void => {
			this.logger.error({err: error, listener: listener.name || 'anonymous'}, 'an onDrain listener failed');
		};

		const calledAt = this.clock.now();
		try {
			const result = listener(notice);
			if (result instanceof Promise) {
				result.catch(failed);
			}
		} catch (error) {
			failed(error);
		}

		const blockedMs = this.clock.now() - calledAt;
		if (blockedMs >= BLOCKING_LISTENER_MS) {
			this.logger.warn({listener: listener.name || 'anonymous', blockedMs: Math.round(blockedMs), closeInMs: notice.closeInMs}, 'an onDrain listener held the event loop: requests and the drain\'s timers waited for it; do slow work asynchronously');
		}
	}
}
