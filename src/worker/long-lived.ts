/**
 * Long-lived connections: upgraded sockets (WebSockets, socket.io) and event
 * streams (`Content-Type: text/event-stream`). They stay open as long as the
 * client likes, so they never hold a drain: they are counted apart from the
 * requests in flight, the app is told when the drain starts (`onDrain`, with
 * the time left and the close code that fits), and whatever is still open when
 * the reject phase ends (a reload: when its linger ends) is closed here as
 * cleanly as the protocol allows: a WebSocket close frame, an event stream's
 * clean end (EventSource then reconnects, after its `retry`, to another pod).
 *
 * Nothing here runs per request: upgrades are rare events, event streams are
 * found among the requests in flight at drain time (ledger.ts), by the
 * `Content-Type` their response sent.
 */
import type {IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import type {Clock} from '../clock.js';
import type {Logger} from '../logger.js';

/**
 * Why long-lived connections are being closed, and the WebSocket close code
 * that says so: 1001 "going away" for a shutdown, 1012 "service restart" for a
 * reload (RFC 6455 section 7.4.1, IANA registry).
 */
export type DrainReason = 'shutdown' | 'reload';
export const CLOSE_CODES: Readonly<Record<DrainReason, 1001 | 1012>> = {shutdown: 1001, reload: 1012};

/** Long-lived connections a filter closed at the end of the reject phase (or of a reload's linger), or cut after `UPGRADE_CLOSE_WAIT_MS`. */
export interface LongLivedClosed {
	readonly upgrades: number;
	readonly streams: number;
}

/**
 * How long the long-lived connections closed at the end of the reject phase
 * get to finish closing (a WebSocket: for the app's library and the client to
 * finish the closing handshake; an event stream: for its end to be written)
 * before the drain destroys what is left and counts it as cut (drain.ts).
 */
export const UPGRADE_CLOSE_WAIT_MS = 2000;

/** What closing the long-lived connections asks of each filter (filter.ts `ServerFilter`). */
interface LongLivedHolder {
	closeLongLived(reason: DrainReason): LongLivedClosed;
	cutLongLived(): LongLivedClosed;
}

/** `each(filter)` summed over `filters`. */
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
 * One drain's end of the long-lived connections: closed at the reject phase's
 * end (a reload: the linger's), and what has not finished closing
 * `UPGRADE_CLOSE_WAIT_MS` later cut, destroyed and counted in one step (apart,
 * the first socket's 'close' could read the count before the others were in
 * it). `closed` counts them all, `cut` those of them destroyed.
 */
export class LongLivedEnd {
	closed = 0;
	cut = 0;
	private state: 'open' | 'waiting' | 'over' = 'open';

	constructor(private readonly filters: Iterable<LongLivedHolder>, private readonly logger: Logger) {}

	/** Closes what is still open; `later` runs the cut UPGRADE_CLOSE_WAIT_MS from now, then `over`. */
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

	/**
	 * With `open` long-lived connections left: true when they are none, or
	 * their wait is over (any sorted out since, a response that became an event
	 * stream late, cut as well). Until then the process must not cut them mid-frame.
	 */
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

// --- Event streams ---

/** A `Content-Type` that makes a response an event stream. */
const EVENT_STREAM = /^\s*text\/event-stream/i;
const EVENT_STREAM_HEADER = /\r\ncontent-type:[ \t]*text\/event-stream/i;

/** True when an HTTP/1.1 response is an event stream: its `Content-Type`, set or already sent. */
export function isEventStreamResponse(response: ServerResponse): boolean {
	const type = response.getHeader('content-type');
	if (type !== undefined) {
		return typeof type === 'string' && EVENT_STREAM.test(type);
	}

	// `writeHead(status, {...})` without an earlier `setHeader` sends its headers
	// without storing them: read the header block that went out.
	const header = (response as {_header?: unknown})._header;
	return typeof header === 'string' && EVENT_STREAM_HEADER.test(header);
}

/** True when the headers an HTTP/2 stream sent make it an event stream. Names may be in any case on the `'stream'` API. */
export function isEventStreamHeaders(sent: OutgoingHttpHeaders | undefined): boolean {
	for (const name in sent) {
		if (name.toLowerCase() === 'content-type') {
			const type = sent[name];
			return typeof type === 'string' && EVENT_STREAM.test(type);
		}
	}

	return false;
}

/** True when the client asks for an event stream (EventSource sends `Accept: text/event-stream`). */
export function wantsEventStream(headers: IncomingHttpHeaders): boolean {
	const {accept} = headers;
	return accept !== undefined && accept.includes('text/event-stream');
}

/**
 * What a new event stream gets when it must go elsewhere, in a 200 that ends
 * at once: a 503 would make EventSource give up for good (WHATWG: any non-200
 * fails the connection); a 200 stream that ends makes it reconnect after
 * `retryMs`. In the reject phase that is `Retry-After` in milliseconds: the
 * whole pod is going away. A retiring worker uses RETIRE_RETRY_MS.
 */
export function eventStreamRetryBody(retryMs: number): Buffer {
	return Buffer.from(`retry: ${retryMs}\n\n`);
}

/**
 * The `retry:` a retiring worker (a reload) gives an event stream that arrives
 * on one of its kept-alive connections, instead of serving it until the
 * linger's end. The other workers of the pod are serving, so the reconnect
 * may come at once; not 0, because EventSource keeps the value as its
 * reconnection time for the rest of its life (WHATWG "reconnection time"),
 * and a later outage would then meet a reconnect loop with no pause. 250 ms is
 * unnoticeable next to the browsers' own default (3 s in Chromium, 5 s in
 * Firefox, which a stream without `retry:` would wait; Firefox raises anything
 * under 500 ms to 500), and the app's next stream can set its own value with a
 * `retry:` of its own.
 */
export const RETIRE_RETRY_MS = 250;

// --- Upgraded connections ---

/** A server-to-client WebSocket close frame (unmasked): FIN + opcode 8, the code, a short reason. */
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
 * An event stream the drain ended while the app still writes to it: the usual
 * handler writes on a timer until the response's `'close'`, which a client that
 * stopped reading delays past our `end()`. Node reports each such write as an
 * `ERR_STREAM_WRITE_AFTER_END` error event, which would crash a worker whose
 * app has no listener for it, in the drain, with its requests in flight. Only
 * that error is ours to take; any other still reaches the app's listeners, or
 * is thrown as before when it has none.
 */
export function endOwnedStream(stream: NodeJS.EventEmitter & {end(): unknown}): void {
	stream.on('error', function onError(this: NodeJS.EventEmitter, error: Error & {code?: string}) {
		if (error.code !== 'ERR_STREAM_WRITE_AFTER_END' && this.listenerCount('error') === 1) {
			throw error;
		}
	});
	stream.end();
}

/** The upgraded connections of one server, each with whether it is a WebSocket. */
export class Upgrades {
	private readonly open = new Map<Socket, boolean>();

	/** `onClosed`: one closed after `close()` (the drain waits for them to finish closing). */
	constructor(private readonly onClosed: () => void) {}

	private closing = false;

	get size(): number {
		return this.open.size;
	}

	/** An upgrade the app takes: counted until its socket closes. */
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

	/**
	 * Closes every upgraded connection: a WebSocket gets a close frame with the
	 * reason's code where one can be written safely, then its library and the
	 * client have until `cut()` (the drain calls it `UPGRADE_CLOSE_WAIT_MS`
	 * later) to finish the closing handshake. Returns how many there were.
	 */
	close(reason: DrainReason): number {
		this.closing = true;
		for (const [socket, webSocket] of this.open) {
			sendCloseFrame(socket, webSocket ? CLOSE_FRAMES[reason] : undefined);
		}

		return this.open.size;
	}

	/**
	 * Destroys the upgraded connections still open and returns how many. They
	 * leave `size` at once, not at their `'close'`, which comes later: each is
	 * counted once, as cut here, never again as one still open (drain.ts
	 * `longLivedSettled`).
	 */
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
 * Starts closing one upgraded connection. A WebSocket gets `frame` (its close
 * frame) if the handshake answer went out and the connection is still
 * writable: the app's library writes whole frames in one go, and a control
 * frame may come between the fragments of a message (RFC 6455 section 5.4), so
 * the frame lands on a frame boundary. Then the library and the client close
 * it (or `Upgrades.cut()` destroys it). Anything else is destroyed now.
 */
function sendCloseFrame(socket: Socket, frame: Buffer | undefined): void {
	if (frame === undefined || !socket.writable || socket.writableEnded || socket.bytesWritten === 0) {
		socket.destroy();
		return;
	}

	socket.on('error', ignoreError);
	socket.write(frame);
}

// --- The onDrain notice ---

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
 * An `onDrain` listener that runs this long before it returns has held the
 * event loop: requests queued meanwhile, the drain's own timers (the reject
 * phase's end) fired late, and arrivals read after it are timed when they were
 * read. Said once per listener, as the likely cause of what follows.
 */
export const BLOCKING_LISTENER_MS = 500;

/**
 * The app's `onDrain` listeners. Each is told once: when the drain starts (or
 * a reload retires the worker), or at once (on the next tick) if it is added
 * after that. One that throws or rejects is logged, never fatal.
 */
export class DrainNotices {
	private readonly listeners: DrainListener[] = [];
	/** The reason and the `clock.now()` moment long-lived connections are closed, once the drain began. */
	private closing: {readonly reason: DrainReason; readonly at: number} | undefined;

	constructor(private readonly clock: Clock, private readonly logger: Logger) {}

	/** Why long-lived connections are closed, once the drain or retire began. */
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

	/** The drain began: long-lived connections are closed at `closeAt` (`clock.now()` time). Tells every listener. */
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
