/**
 * How an HTTP/1.1 connection ends during a drain (http2-sessions.ts is the HTTP/2
 * side): its last response carries `Connection: close`, so Node ends the connection
 * after it (RFC 9112 section 9.6). Only the last: Node drops the pipelined responses
 * queued behind the first that carries it. The marks below live on the socket and
 * are set on rare paths only, so serving pays nothing per request.
 */
import http, {type IncomingMessage, type ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import {FIRST_REQUEST_WAIT_MS, LINGER_MS} from './filter.js';
import {ignoreError} from './long-lived.js';

/** The last response queued behind another (pipelining): tells which is a connection's last without a per-request sequence number. */
const LAST_QUEUED = Symbol('graceful-cluster.lastQueued');
/** A response on this connection carries the drain's `Connection: close`; a request behind it is never processed. */
const CLOSING = Symbol('graceful-cluster.closing');
const LINGERING = Symbol('graceful-cluster.lingering');
const OWN_END = Symbol('graceful-cluster.ownEnd');
const FRESH = Symbol('graceful-cluster.fresh');
type TrackedSocket = Socket & {[LAST_QUEUED]?: ServerResponse | undefined; [CLOSING]?: true; [LINGERING]?: true; [OWN_END]?: Socket['end']; [FRESH]?: true; _httpMessage?: unknown};

/** True once `socket`'s last response has been decided on during a drain: what the client sends after it is dropped. */
export function isClosing(socket: Socket | undefined): boolean {
	return (socket as TrackedSocket | undefined)?.[CLOSING] === true;
}

/** What the filter does with a connection once its last response is out (`ClosingConnections#afterLast`). */
export type LingerAfterLast = (socket: Socket) => void;

/**
 * Node closes a `Connection: close` socket with `socket.destroySoon()` once the response
 * is out; `linger` takes that over (`closeLingering`) so the close cannot be a reset.
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
 * At the drain's start: `Connection: close` on `response` if it is its connection's
 * last. If that one's headers are already sent, the close goes on the connection's
 * next response, or on the idle close when the drain stops listening.
 */
export function closeAfterLast(response: ServerResponse, isOpen: (response: ServerResponse) => boolean, linger: LingerAfterLast): void {
	const socket = response.req.socket as TrackedSocket | null;
	if (socket !== null) {
		// Responses on a connection finish in arrival order: while the last queued one is
		// open it is the last; once closed, only the response behind it can be open.
		const last = socket[LAST_QUEUED];
		if (last !== undefined && last !== response && isOpen(last)) {
			return;
		}

		if (!response.headersSent) {
			markClosing(socket, linger);
		}
	}

	insistOnClose(response);
}

const isConnection = (name: unknown): boolean => typeof name === 'string' && name.toLowerCase() === 'connection';

/** writeHead()'s headers (an object, `[name, value, ...]` or `[[name, value], ...]`) without `Connection`, as an object or a flat list. */
function withoutConnection(headers: unknown): unknown {
	if (Array.isArray(headers)) {
		if (headers.length > 0 && Array.isArray(headers[0])) {
			// Flat: with a header set before it (ours), writeHead() takes only `[name, value, ...]`.
			return (headers as unknown[][]).flatMap(([name, value]) => (isConnection(name) ? [] : [name, value]));
		}

		return headers.flatMap((item: unknown, index) => (index % 2 === 0 && isConnection(item)) || (index % 2 === 1 && isConnection(headers[index - 1])) ? [] : [item]);
	}

	if (typeof headers === 'object' && headers !== null) {
		return Object.fromEntries(Object.entries(headers).filter(([name]) => !isConnection(name)));
	}

	return headers;
}

/**
 * `Connection: close` on `response` (the connection's last), kept whatever the app sets
 * after it: an app that sets `Connection: keep-alive` (a proxy copying its upstream's
 * headers) would keep open a connection whose next request the filter never runs, and
 * that request would wait forever. The response's own methods are wrapped, on this
 * response only: no other pays.
 */
export function insistOnClose(response: ServerResponse): void {
	if (response.headersSent) {
		return;
	}

	response.setHeader('Connection', 'close');
	const {setHeader, appendHeader, removeHeader, writeHead} = response;
	Object.assign(response, {
		setHeader(this: ServerResponse, name: string, value: number | string | readonly string[]) {
			return isConnection(name) ? this : Reflect.apply(setHeader, this, [name, value]) as ServerResponse;
		},
		appendHeader(this: ServerResponse, name: string, value: string | readonly string[]) {
			return isConnection(name) ? this : Reflect.apply(appendHeader, this, [name, value]) as ServerResponse;
		},
		removeHeader(this: ServerResponse, name: string) {
			if (!isConnection(name)) {
				Reflect.apply(removeHeader, this, [name]);
			}
		},
		writeHead(this: ServerResponse, ...args: unknown[]) {
			return Reflect.apply(writeHead, this, args.map(arg => withoutConnection(arg))) as ServerResponse;
		},
	});
}

/**
 * A pipelined response waiting behind another has no socket yet, and Node never
 * emits 'close' on it if the connection closes first: `onClose` is called for it then.
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
 * During a drain every response let through is its connection's last. False when the
 * connection has that last response already: Node ends it before this request's turn,
 * so the request is not processed (the client may retry it); its body is read so that
 * the close is a FIN, not a reset.
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
 * Runs `close` (`http.Server#close()`, which closes the connections Node thinks idle)
 * without cutting a response still being written: Node counts a connection idle once
 * `res.end()` is called, even while a slow client has most of the body left to read.
 * Node skips a connection whose response is not finished, so the open ones are shown
 * as unfinished for the length of the call.
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

const STILL_TO_COME = Object.freeze({finished: false});

/**
 * Connections with no response yet and no request: node:cluster handed them over
 * just before the drain stopped listening, and their first request is on its way.
 * Node thinks them idle, and `close()` would end them with no answer.
 */
export function freshConnections(server: http.Server): Socket[] {
	return connectionsOf(server)?.filter(isFresh) ?? [];
}

const isFresh = (socket: Socket): boolean => socket.bytesWritten === 0 && !(socket as TrackedSocket)._httpMessage;

/**
 * Waits up to `waitMs` for each fresh connection's first request, answered as any after
 * the drain stopped listening (a 503 with `Connection: close`); one still without a
 * request then is closed as `closeLingering` does.
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

/** Sockets in Node's own connection list, less those lingering or awaited; undefined when the server keeps none (HTTP/2 with `allowHTTP1`) or Node renamed it. */
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
 * Closes a connection without losing what it still has to send: a FIN after the
 * queued bytes, then what the client sends is read and dropped until it closes its
 * side, is quiet for LINGER_MS, or `lingerMs` passes. `destroy()` with unread bytes in
 * the receive buffer (an unread POST body, a pipelined request) makes Linux send a
 * reset, which discards the tail of the response still in the send buffer.
 */
export function closeLingering(socket: Socket, lingerMs: number, closed: () => void): void {
	(socket as TrackedSocket)[CLOSING] = true;
	(socket as TrackedSocket)[LINGERING] = true;
	const end = (): void => {
		clearTimeout(quiet);
		clearTimeout(longest);
		// Bytes Node still holds (a 503 queued behind a response to a slow reader) are
		// written first: bounded by the deadline, not by the linger.
		if (socket.writableFinished) {
			socket.destroy();
		} else {
			socket.once('finish', () => socket.destroy());
		}
	};

	// A client still sending keeps the connection until it stops, or the close would be
	// a reset. Polled from `bytesRead`: a 'data' listener takes the socket from Node's native parser.
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
 * Node's HTTP server ends the socket again on the client's FIN (`socketOnEnd`,
 * unguarded in Node 20), and that second `end()` builds an unused
 * `ERR_STREAM_ALREADY_FINISHED` with a captured stack: about a sixth of a drain 503's
 * cost to the worker. So a bare `end()` on an ended socket returns at once.
 */
function endOnce(this: TrackedSocket, ...args: unknown[]): TrackedSocket {
	if (args.length === 0 && (this.writableEnded || this.destroyed)) {
		return this;
	}

	return Reflect.apply(this[OWN_END]!, this, args) as TrackedSocket;
}

/** Where Node keeps no list of the connections, `closeAllConnections()` destroys them. */
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

export class ClosingConnections {
	private count = 0;

	constructor(private readonly onIdle: () => void, private readonly lingerMs: () => number) {}

	get size(): number {
		return this.count;
	}

	readonly afterLast = (socket: Socket): void => {
		this.count++;
		closeLingering(socket, this.lingerMs(), this.closed);
	};

	all(server: http.Server): void {
		this.count += closeAllLingering(server, this.lingerMs(), this.closed);
	}

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
