/**
 * How an HTTP/1.1 connection ends during a drain (http2-sessions.ts is the
 * HTTP/2 side): its last response carries `Connection: close`, so Node ends the
 * connection after it (RFC 9112 section 9.6) and the client opens its next
 * request elsewhere. Only the last: Node ends the connection after the first
 * response that carries it and drops the responses queued behind it, though
 * the app has computed them (pipelining).
 *
 * What a connection holds is marked on its socket, on rare paths only (a
 * pipelined request, a request during the drain): nothing per request while
 * serving.
 */
import http, {type IncomingMessage, type ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import {FIRST_REQUEST_WAIT_MS, LINGER_MS} from './filter.js';
import {ignoreError} from './long-lived.js';

/**
 * On a connection: the last app response that arrived while an earlier one
 * still held the connection (pipelining). Set on the pipelined path only, so the
 * drain can tell which response is a connection's last without a per-request
 * sequence number.
 */
const LAST_QUEUED = Symbol('graceful-cluster.lastQueued');
/**
 * On a connection, during a drain: a response on it carries `Connection: close`,
 * so Node ends the connection after it; a request that arrives behind it is
 * never processed.
 */
const CLOSING = Symbol('graceful-cluster.closing');
/** On a connection: it is being closed gracefully (`closeLingering`). */
const LINGERING = Symbol('graceful-cluster.lingering');
/** On a lingering connection: its own `end`, which `endOnce` stands in front of. */
const OWN_END = Symbol('graceful-cluster.ownEnd');
/** On a connection whose first request the drain waits for (`awaitFirstRequest`). */
const FRESH = Symbol('graceful-cluster.fresh');
type TrackedSocket = Socket & {[LAST_QUEUED]?: ServerResponse | undefined; [CLOSING]?: true; [LINGERING]?: true; [OWN_END]?: Socket['end']; [FRESH]?: true; _httpMessage?: unknown};

/** True once `socket`'s last response has been decided on during a drain: what the client sends after it is dropped. */
export function isClosing(socket: Socket | undefined): boolean {
	return (socket as TrackedSocket | undefined)?.[CLOSING] === true;
}

/** What the filter does with a connection once its last response is out (http1-filter.ts `lingerAfterLast`). */
export type LingerAfterLast = (socket: Socket) => void;

/**
 * Marks `socket` as closing: a response on it carries `Connection: close`.
 * Node then closes the socket once that response is out, with
 * `socket.destroySoon()`, its one call of it; `linger` takes that over
 * (`closeLingering`), so the close cannot be a reset. Once: a connection the
 * drain's end is closing already (a 503 queued behind a slow response, out
 * after it) needs nothing more.
 */
function markClosing(socket: TrackedSocket, linger: LingerAfterLast): void {
	socket[CLOSING] = true;
	socket.destroySoon = function (this: TrackedSocket) {
		if (this[LINGERING] !== true) {
			linger(this);
		}
	};
}

/**
 * At the drain's start: `Connection: close` on `response` if it is the last
 * its connection holds (`isOpen`: still in flight). If the last one's headers
 * are already sent, the close goes on whatever arrives next on the
 * connection, or the connection is closed with the idle ones when the drain
 * stops listening (retiring: when the linger ends).
 */
export function closeAfterLast(response: ServerResponse, isOpen: (response: ServerResponse) => boolean, linger: LingerAfterLast): void {
	const socket = response.req.socket as TrackedSocket | null;
	if (socket !== null) {
		// Responses on a connection finish in arrival order, so while the last
		// queued one is open it is the last; once it has closed, only the
		// response that arrived after it (holding the connection) can be open.
		const last = socket[LAST_QUEUED];
		if (last !== undefined && last !== response && isOpen(last)) {
			return;
		}

		if (!response.headersSent) {
			markClosing(socket, linger);
		}
	}

	if (!response.headersSent) {
		response.setHeader('Connection', 'close');
	}
}

/**
 * A pipelined request whose response waits behind another has no socket yet,
 * and if the connection closes first (the client left, or the response ahead
 * carried `Connection: close`), Node never emits 'close' on it: `onClose` is
 * called with the response as `this` when its connection closes. Rare, so a
 * closure here is fine.
 */
export function watchQueued(request: IncomingMessage, response: ServerResponse, onClose: (this: ServerResponse) => void): void {
	const socket = request.socket as TrackedSocket;
	socket[LAST_QUEUED] = response;
	const onSocketClose = (): void => {
		onClose.call(response);
	};

	socket.once('close', onSocketClose);
	response.once('close', () => {
		socket.removeListener('close', onSocketClose);
		if (socket[LAST_QUEUED] === response) {
			socket[LAST_QUEUED] = undefined;
		}
	});
}

/**
 * During a drain, every response the filter lets through is its connection's
 * last (it carries `Connection: close`). True when this request may have that
 * last response; false when the connection already has it: Node will end the
 * connection before this request's turn, so it must not be processed nor
 * answered (the client sees the connection close and may retry it). Its body
 * is read so that the close is a FIN, not a reset.
 */
export function claimLast(request: IncomingMessage, linger: LingerAfterLast): boolean {
	const socket = request.socket as TrackedSocket | null;
	if (socket === null) {
		return true;
	}

	if (socket[CLOSING] === true) {
		request.resume();
		return false;
	}

	markClosing(socket, linger);
	return true;
}

/**
 * Runs `close` (an `http.Server#close()`, which closes the connections Node
 * thinks idle) without cutting a response still on its way to the client. To
 * Node a connection is idle once its response has ended (`res.end()` called),
 * even while the body still waits to be written to a slow client: a 50 MB
 * `res.end(buffer)` to a client reading at 5 MB/s was cut after 13.6 MB at the
 * end of the reject phase. Node skips a connection whose response is not
 * finished, so those responses (the ledger's `open` at drain time, never per
 * request) are shown as unfinished for the length of the call.
 */
export function closeKeepingUnflushed(open: readonly ServerResponse[], fresh: readonly Socket[], close: () => void): void {
	type Finishable = ServerResponse & {finished: boolean};
	const unflushed = (open as readonly Finishable[]).filter(response => response.finished && !response.writableFinished);
	for (const response of unflushed) {
		response.finished = false;
	}

	// A fresh connection (`freshConnections`) is skipped the same way: as if a response were on it.
	const before = fresh.map(socket => (socket as TrackedSocket)._httpMessage);
	for (const socket of fresh) {
		(socket as TrackedSocket)._httpMessage = STILL_TO_COME;
	}

	try {
		close();
	} finally {
		for (const response of unflushed) {
			response.finished = true;
		}

		for (const [index, socket] of fresh.entries()) {
			(socket as TrackedSocket)._httpMessage = before[index];
		}
	}
}

/** What a fresh connection's response looks like to `closeIdleConnections()` for the length of the call: not finished. */
const STILL_TO_COME = Object.freeze({finished: false});

/**
 * The connections of `server` that have had no response yet and hold no
 * request: node:cluster handed them to this worker in the last moment before
 * the drain stopped listening, and their first request is still on its way
 * (none of it yet, or part of it: a request line split across packets). To
 * Node they are idle, and `http.Server#close()` would destroy them: the
 * client, whose connection the port had accepted, got a reset or a close and
 * no answer. An idle keep-alive connection has had a response (bytes
 * written). Drain time only.
 */
export function freshConnections(server: http.Server): Socket[] {
	return connectionsOf(server)?.filter(isFresh) ?? [];
}

const isFresh = (socket: Socket): boolean => socket.bytesWritten === 0 && !(socket as TrackedSocket)._httpMessage;

/**
 * Waits up to `waitMs` for the first request of each fresh connection
 * (`freshConnections`): one that comes is answered as any request after the
 * drain stopped listening (a 503 with `Connection: close`, and the connection
 * closes after it). One still without a request then (a client that connects
 * ahead of its requests, or one that sends a request this slowly) is closed
 * as `closeLingering` does. `closed` is called once for each, when its
 * socket has closed.
 */
export function awaitFirstRequest(sockets: readonly Socket[], waitMs: number, lingerMs: number, closed: () => void): void {
	for (const socket of sockets) {
		(socket as TrackedSocket)[FRESH] = true;
		socket.once('close', closed);
	}

	setTimeout(() => {
		for (const socket of sockets) {
			delete (socket as TrackedSocket)[FRESH];
			// Its request came and was answered (closing), or is being answered: that ends it.
			const tracked = socket as TrackedSocket;
			if (!socket.destroyed && isFresh(socket) && tracked[CLOSING] !== true && tracked[LINGERING] !== true) {
				closeLingering(socket, lingerMs, () => {});
			}
		}
	}, waitMs);
}

/** Node's key for an http.Server's own list of its connections (what `closeAllConnections()` walks); found once. */
let connectionsKey: symbol | undefined;

/**
 * The sockets of `server`'s connections, from Node's own list, but those
 * lingering already (`closeLingering`) or waited for (`awaitFirstRequest`); undefined when the server keeps none
 * (an HTTP/2 server with `allowHTTP1`) or a Node version keeps it under
 * another name. At the drain's end only.
 */
export function connectionsOf(server: http.Server): Socket[] | undefined {
	connectionsKey ??= Object.getOwnPropertySymbols(server).find(key => key.description === 'http.server.connections');
	const list = connectionsKey === undefined ? undefined : (server as unknown as Record<symbol, {all?: () => Array<{socket?: Socket | null}>} | undefined>)[connectionsKey];
	if (typeof list?.all !== 'function') {
		return undefined;
	}

	const sockets: Socket[] = [];
	for (const connection of list.all()) {
		if (connection.socket && !connection.socket.destroyed && (connection.socket as TrackedSocket)[LINGERING] !== true && (connection.socket as TrackedSocket)[FRESH] !== true) {
			sockets.push(connection.socket);
		}
	}

	return sockets;
}

/**
 * Closes a connection with nothing in flight without losing what it still has
 * to send: a FIN after the bytes still queued, then what the client still
 * sends is read and dropped (a request parsed from it is never processed:
 * `claimLast`) until the client closes its side, or has sent nothing for a
 * window of LINGER_MS, or `lingerMs` at most.
 * `destroy()` instead closes the socket at once, and Linux answers a close
 * with unread bytes in the receive buffer (the body of a POST the app never
 * read, a request pipelined behind the last response) with a reset, which
 * throws away the tail of the last response still in the send buffer: a
 * slow reader got 7.3 of 10 MB, and the drain read clean. `closed` is called
 * once the socket has closed.
 */
export function closeLingering(socket: Socket, lingerMs: number, closed: () => void): void {
	(socket as TrackedSocket)[CLOSING] = true;
	(socket as TrackedSocket)[LINGERING] = true;
	const end = (): void => {
		clearTimeout(quiet);
		clearTimeout(longest);
		// Bytes Node still holds (a drain 503 queued behind a response to a slow
		// reader) are written first, as a response in flight would be: bounded
		// by the deadline, not by the linger.
		if (socket.writableFinished) {
			socket.destroy();
		} else {
			socket.once('finish', () => socket.destroy());
		}
	};

	// A client still sending (an upload the app never read) keeps the
	// connection until it stops: destroyed meanwhile, the close would be a
	// reset. Read from `bytesRead` once a window, not from 'data' events: a
	// 'data' listener takes the socket from Node's native parser.
	let readBefore = socket.bytesRead;
	const quiet = setTimeout(() => {
		if (socket.bytesRead === readBefore) {
			end();
		} else {
			readBefore = socket.bytesRead;
			quiet.refresh();
		}
	}, Math.min(LINGER_MS, lingerMs));
	const longest = setTimeout(end, lingerMs);
	socket.once('close', () => {
		clearTimeout(quiet);
		clearTimeout(longest);
		closed();
	});
	socket.on('error', ignoreError);
	// Both sides ended, the socket destroys itself (autoDestroy): the client's
	// FIN means it has nothing more to send, so the close is clean.
	socket.end();
	(socket as TrackedSocket)[OWN_END] = socket.end;
	socket.end = endOnce as Socket['end'];
	socket.resume();
}

/**
 * A lingering socket's `end`, once it has ended: Node's HTTP server ends the
 * socket again when the client's FIN comes (`socketOnEnd`, unguarded in Node
 * 20), and a second `end()` builds an `ERR_STREAM_ALREADY_FINISHED` that
 * nobody receives, its message formatted and its stack captured: about a
 * sixth of what a drain 503's connection cost the worker (380 against 321 µs,
 * `-w 1`, before and after). A bare `end()` on a socket ended or destroyed
 * already does nothing else, so it returns at once; a call with data or a
 * callback goes to the socket's own `end`.
 */
function endOnce(this: TrackedSocket, ...args: unknown[]): TrackedSocket {
	if (args.length === 0 && (this.writableEnded || this.destroyed)) {
		return this;
	}

	return Reflect.apply(this[OWN_END]!, this, args) as TrackedSocket;
}

/**
 * Closes `server`'s connections as `closeLingering` does; returns how many
 * are closing (`closed` is called for each). Where Node keeps no list of
 * them, `closeAllConnections()` destroys what it tracks, as before.
 */
export function closeAllLingering(server: http.Server, lingerMs: number, closed: () => void): number {
	const sockets = connectionsOf(server);
	if (sockets === undefined) {
		http.Server.prototype.closeAllConnections.call(server);
		return 0;
	}

	for (const socket of sockets) {
		closeLingering(socket, lingerMs, closed);
	}

	return sockets.length;
}

/**
 * The connections a server's filter is closing gracefully, each counted until
 * it has closed (`size`); `onIdle` when the last has. `lingerMs`: how long one
 * closed now may linger (the drain's bound).
 */
export class ClosingConnections {
	private count = 0;

	constructor(private readonly onIdle: () => void, private readonly lingerMs: () => number) {}

	get size(): number {
		return this.count;
	}

	/**
	 * A connection whose last response carries the drain's `Connection: close`:
	 * Node's own close after it would be a destroy, and unread bytes in its
	 * receive buffer (an upload the app never read) would turn it into a reset
	 * that throws away the response's tail; the close is ours. Once per connection.
	 */
	readonly afterLast = (socket: Socket): void => {
		this.count++;
		closeLingering(socket, this.lingerMs(), this.closed);
	};

	/** Every connection of `server` left once nothing is in flight (`closeAllLingering`). */
	all(server: http.Server): void {
		this.count += closeAllLingering(server, this.lingerMs(), this.closed);
	}

	/** Connections accepted just before the server stopped listening: their first request is waited for (`awaitFirstRequest`). */
	fresh(sockets: readonly Socket[]): void {
		if (sockets.length > 0) {
			this.count += sockets.length;
			awaitFirstRequest(sockets, Math.min(FIRST_REQUEST_WAIT_MS, this.lingerMs()), this.lingerMs(), this.closed);
		}
	}

	private readonly closed = (): void => {
		this.count--;
		if (this.count === 0) {
			this.onIdle();
		}
	};
}
