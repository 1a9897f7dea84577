/**
 * The servers of a worker whose app never called `attach()` (the basic
 * drain), from the drain on. node:cluster's disconnect, which the primary
 * sends when the reject phase ends, closes every server the worker listens
 * on, and the app's own shutdown usually closes them again:
 * `server.close(callback)` in a hand-written handler, stoppable's `stop()`,
 * terminus, http-terminator, lightship's handlers. Which comes first is a race
 * (bootstrap.ts runs the app's listeners at the reject phase's end or at the
 * disconnect), and Node answers the second close with `ERR_SERVER_NOT_RUNNING`:
 * terminus and stoppable then exit 1 with their cleanup undone, and
 * http-terminator's `terminate()` rejects, leaving the rest of the handler to
 * the deadline.
 *
 * So, from the drain on, a server that listened gets:
 *
 * - **a second close that succeeds**: `close(callback)` on a server already
 *   closed calls back without an error once it has closed (its last
 *   connection ended), as `attach()`'s filter does (http1-filter.ts
 *   `closeAgain`). Node's own second close is not made: it would emit
 *   `'close'` again, and an app that ends its pool there ends it twice.
 * - **its connections closed once done**: once it is closed, each connection
 *   is closed when its last response is out and its client quiet, not only
 *   those idle at the close (`closeWhenIdle`): a stream, an upload, or a
 *   request pipelined behind another kept the worker until `keepAliveTimeout`.
 * - **`Connection: close` from the drain on**: a keep-alive client keeps
 *   sending requests on a connection it already has, so a closed server's
 *   `'close'` (the callback the app waits for) would wait for the client to
 *   stop, and the connections still idle at the disconnect are closed under
 *   whatever request their client sends just then: a reset. Each request on
 *   an HTTP/1 server from the drain on is still served; one that lets the
 *   connection end cleanly (below) with `Connection: close`, as is a response
 *   already on its way (`endInFlight`): its client's next request opens a new
 *   connection, which the reject phase still takes.
 *
 * The servers are known from node:cluster itself: every `listen()` in a
 * worker asks it for the handle (`cluster._getServer`, not in its types), and
 * those are the servers its disconnect closes. Nothing is added to a request
 * before the drain.
 */
import cluster from 'node:cluster';
import {ServerResponse, type IncomingMessage, type Server as HttpServer} from 'node:http';
import type {Http2Session} from 'node:http2';
import net from 'node:net';
import {FIRST_REQUEST_WAIT_MS, LINGER_MAX_MS} from './filter.js';
import {closeLingering, connectionsOf, isClosing} from './http1-connections.js';

type GetServer = (server: unknown, ...rest: unknown[]) => unknown;
type CloseCallback = (error?: Error) => void;

export interface ClosedServers {
	/** The drain began: the servers listening now, and any that listens later, get the above. */
	drain(): void;
	/**
	 * A reload retires this worker: its servers stop listening now (node:cluster
	 * hands new connections to the others), their connections stay open for
	 * the linger, told `Connection: close` (above).
	 */
	stopListening(): void;
	/**
	 * The primary disconnected this worker: each server is closed again, as
	 * node:cluster's disconnect closes those still listening, so that the idle
	 * connections stopListening() kept open are closed too.
	 */
	disconnected(): void;
}

/** Follows the worker's servers from its first `listen()`; a no-op where node:cluster has no `_getServer` (another Node). */
export function followServers(): ClosedServers {
	const servers = new Set<net.Server>();
	let draining = false;
	const host = cluster as unknown as {_getServer?: GetServer};
	const getServer = host._getServer;
	if (typeof getServer === 'function') {
		// eslint-disable-next-line func-names
		host._getServer = function (this: unknown, server: unknown, ...rest: unknown[]): unknown {
			// A dgram socket asks too; only a net.Server has connections to close.
			if (server instanceof net.Server) {
				followSessions(server);
				if (draining) {
					closeGracefully(server);
				} else {
					servers.add(server);
					server.once('close', () => servers.delete(server));
				}
			}

			return Reflect.apply(getServer, this, [server, ...rest]);
		};
	}

	// The servers the drain follows: stopListening() and disconnected() act on them.
	const drained = new Set<net.Server>();
	return {
		drain() {
			if (draining) {
				return;
			}

			draining = true;
			for (const server of servers) {
				closeGracefully(server);
				drained.add(server);
			}

			servers.clear();
		},
		stopListening() {
			for (const server of drained) {
				if (server.listening) {
					// net's own close: node:http's would close the idle connections at once too.
					endInFlight(server);
					Reflect.apply(net.Server.prototype.close, server, []);
				} else {
					drained.delete(server);
				}
			}
		},
		disconnected() {
			// Not a close of ours: a closed server's second close emits 'close'
			// again, and an app that ends its pool there ends it twice.
			for (const server of drained) {
				closeWhenIdle(server);
			}

			drained.clear();
		},
	};
}

const wrapped = new WeakSet<net.Server>();

function closeGracefully(server: net.Server): void {
	if (wrapped.has(server)) {
		return;
	}

	wrapped.add(server);
	endConnectionsAfterResponse(server);
	dropAfterOwnClose(server);
	endInFlight(server);
	// `open` once it listened; `closed` once its 'close' is out (its last
	// connection ended after its close). Not listening while `open`: closed,
	// its connections still ending.
	let state: 'unopened' | 'open' | 'closed' = server.listening ? 'open' : 'unopened';
	server.on('listening', () => {
		state = 'open';
	});
	server.on('close', () => {
		state = 'closed';
	});
	// Whatever `close` is in place (an own one of a library's included) stays
	// the one called for a first close; ours decides only what a second one does.
	const close = server.close;
	// node:http's close first calls the server's `closeIdleConnections()`, which
	// counts a connection whose last response is ended as idle though its bytes
	// are still in the socket's buffer, and destroys it: a slow reader of a
	// 20 MB `end(buffer)` got 9.9 MB and a clean close. Within our close it does
	// nothing; closeWhenIdle() then closes each connection once its bytes are out.
	let closing = false;
	const closeIdle = (server as {closeIdleConnections?: () => void}).closeIdleConnections;
	if (typeof closeIdle === 'function') {
		// eslint-disable-next-line func-names
		(server as {closeIdleConnections?: () => void}).closeIdleConnections = function (this: net.Server): void {
			if (!closing) {
				Reflect.apply(closeIdle, this, []);
			}
		};
	}

	// eslint-disable-next-line func-names
	server.close = function (this: net.Server, ...args: unknown[]): net.Server {
		if (this.listening || state === 'unopened') {
			closing = true;
			let result: net.Server;
			try {
				result = Reflect.apply(close, this, args) as net.Server;
			} finally {
				closing = false;
			}

			// node:cluster's disconnect waits for this close, its last connection
			// ended, before it disconnects the worker. A library's own close may
			// close later: its responses on their way are told meanwhile.
			if (this.listening) {
				endInFlight(this);
			} else {
				closeWhenIdle(this);
			}

			return result;
		}

		// Node's own close would emit 'close' again (an app that ends its pool
		// there ends it twice) and call back with ERR_SERVER_NOT_RUNNING. What it
		// does besides, closing the connections idle by now, is done here; the
		// callback hears the close itself.
		closeWhenIdle(this);
		const callback = typeof args[0] === 'function' ? args[0] as CloseCallback : undefined;
		if (callback && state === 'closed') {
			process.nextTick(callback);
		} else if (callback) {
			this.once('close', () => {
				callback();
			});
		}

		return this;
	} as net.Server['close'];
}

/** node:http's, on an HTTP/1 or HTTPS server; a plain net.Server has no idle connections it knows of. */
function closeIdleConnections(server: net.Server): void {
	(server as {closeIdleConnections?: () => void}).closeIdleConnections?.();
}

/**
 * An HTTP/1 server's connections end after their next response, when that
 * closes them cleanly: at once for a request with no body, by an idempotent
 * method; any other once the app has read it whole.
 * Node closes the socket as soon as a `Connection: close` response is out,
 * without reading what the client still sends (`attach()`'s filter reads it
 * first): an upload the app answered without reading (a 401 before the body
 * parser) turned that close into a reset that lost the answer, and a second
 * request pipelined behind the first ran in the app, its response thrown
 * away. A client retries such a request only when it may (RFC 9110 9.2.2).
 * Ahead of the app's listeners, so that the app's own `Connection` header, if
 * it sets one, is the one sent.
 */
function endConnectionsAfterResponse(server: net.Server): void {
	// Not on an HTTP/2 server: a 'request' listener there turns on Node's
	// compatibility layer for every stream, a gRPC server's too, whose calls
	// it then drops.
	if (isHttp2(server)) {
		return;
	}

	server.prependListener('request', (request: IncomingMessage, response: unknown) => {
		// An HTTP/2 server's compatibility response would refuse the header.
		if (!(response instanceof ServerResponse)) {
			return;
		}

		// Pipelined behind a response told to end the connection: that one keeps
		// it after all (this request runs in the app now, and its response would
		// be thrown away), if its headers are not out yet; this one may end it.
		const ahead = (request.socket as {_httpMessage?: unknown} | null)?._httpMessage;
		if (ahead instanceof ServerResponse && ahead !== response && told.has(ahead) && !ahead.headersSent) {
			// Said, not left out: an HTTP/1.0 client reads no header as a close.
			ahead.setHeader('Connection', 'keep-alive');
			told.delete(ahead);
		}

		if (response.headersSent) {
			return;
		}

		if (endsCleanly(request)) {
			tellClose(response);
		} else {
			// A body, or another method: once the app has read the request whole
			// (a JSON API's POST, its body parsed before it answers), nothing is
			// left unread for the close to turn into a reset. A POST client does
			// not send its request again on a connection closed under it: told,
			// it moves on to a new one. One the app answers unread is not told.
			request.once('end', () => {
				// Not over a Connection header of the app's own.
				if (!response.headersSent && !response.hasHeader('connection') && (request.socket === null || (lastRequest(request.socket) ?? request) === request)) {
					tellClose(response);
				}
			});
		}
	});
}

/** The responses told `Connection: close` here, not by the app. */
const told = new WeakSet<ServerResponse>();

function tellClose(response: ServerResponse): void {
	response.setHeader('Connection', 'close');
	told.add(response);
}

/**
 * A request that arrives on a connection after our FIN (closeWhenIdle): the
 * client sent it before it saw the close (the keep-alive race), and will see
 * the connection end without an answer. Node's parser still reads it, and
 * the app would run it (a POST that charges a card) with its answer thrown
 * away: it never reaches the app. From the drain on only, on HTTP/1 servers:
 * `emit` is wrapped then, not while serving.
 */
function dropAfterOwnClose(server: net.Server): void {
	if (isHttp2(server)) {
		return;
	}

	const emit = server.emit;
	// eslint-disable-next-line func-names
	server.emit = function (this: net.Server, event: string | symbol, ...args: unknown[]): boolean {
		if ((event === 'request' || event === 'checkContinue' || event === 'upgrade') && isClosing((args[0] as IncomingMessage).socket)) {
			return true;
		}

		return Reflect.apply(emit, this, [event, ...args]) as boolean;
	} as net.Server['emit'];
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE', 'PUT', 'TRACE']);

function endsCleanly({method, headers}: IncomingMessage): boolean {
	const length = headers['content-length'];
	return IDEMPOTENT.has(method ?? '') && headers['transfer-encoding'] === undefined && (length === undefined || length === '0');
}

/**
 * The responses on their way when the drain begins or the server closes,
 * whose headers are not out yet: told `Connection: close` too, once their
 * request has been read whole (nothing left unread for Node's close to turn
 * into a reset). Left keep-alive, such a connection outlived the disconnect's
 * close of the idle ones, and the app's `server.close(callback)` waited for
 * Node's `keepAliveTimeout`: with 65 s (behind an ALB), until the deadline.
 * Not one with a request pipelined behind it, read already (the parser's
 * `incoming` is that later one): it runs in the app, and its response would be
 * thrown away with the connection; closeWhenIdle() ends such a connection.
 */
function endInFlight(server: net.Server): void {
	for (const socket of connectionsOf(server as HttpServer) ?? []) {
		const response = (socket as HttpSocket)._httpMessage;
		if (response instanceof ServerResponse && !response.headersSent && response.req.complete && (lastRequest(socket) ?? response.req) === response.req) {
			tellClose(response);
		}
	}
}

type HttpSocket = net.Socket & {_httpMessage?: unknown; parser?: {incoming?: IncomingMessage | null} | null};

/** The last request the connection's parser read (Node's `socket.parser`, while the connection is open). */
const lastRequest = (socket: net.Socket): IncomingMessage | undefined => (socket as HttpSocket).parser?.incoming ?? undefined;

/**
 * The server is closed: each of its connections is closed once nothing is
 * left for it to do, not only those idle now (node:http's
 * `closeIdleConnections()`). One still answering (a stream, an upload, the
 * requests pipelined behind one) would otherwise stay open until the client
 * left or `keepAliveTimeout` (65 s behind an ALB) passed, and the worker with
 * it, to the deadline. The responses on their way are told first
 * (`endInFlight`); HTTP/2 sessions get a GOAWAY.
 */
function closeWhenIdle(server: net.Server): void {
	endInFlight(server);
	for (const session of sessionsOf.get(server) ?? []) {
		// A GOAWAY: the streams under way finish, then the session closes.
		if (!session.closed && !session.destroyed) {
			session.close();
		}
	}

	const sockets = connectionsOf(server as HttpServer);
	if (sockets === undefined) {
		closeIdleConnections(server);
		return;
	}

	for (const socket of sockets) {
		endWhenDone(socket);
	}
}

const followed = new WeakSet<net.Socket>();

/**
 * Closes a connection once its last response is out and the client has sent
 * nothing more for FIRST_REQUEST_WAIT_MS, with a FIN after the bytes still
 * queued (http1-connections.ts `closeLingering`), not a `destroy()`. A
 * response whose headers went out before the drain told the client the
 * connection stays open, and a client with requests queued (a pool) sends the
 * next within a round trip of reading it: destroyed right after the
 * response's 'finish' (its last bytes in the kernel, not at the client), that
 * request met a closed socket, whose reset threw away the megabytes of the
 * response the client had not read yet (19.2 of 20 MB, a clean end), or was
 * itself reset. Waited for, it is served, with `Connection: close` where that
 * ends the connection cleanly (above).
 */
function endWhenDone(socket: net.Socket): void {
	if (followed.has(socket)) {
		return;
	}

	followed.add(socket);
	// What the client had sent when we last looked: a request since moves the count.
	let readBefore = socket.bytesRead;
	const look = (): void => {
		if (socket.destroyed || isClosing(socket)) {
			return;
		}

		const response = (socket as HttpSocket)._httpMessage;
		if (response instanceof ServerResponse) {
			// Answering: after Node's own 'finish' listener, which hands the
			// connection to the response pipelined next, if any.
			response.once('finish', () => {
				readBefore = socket.bytesRead;
				setTimeout(look, FIRST_REQUEST_WAIT_MS);
			});
		} else if (socket.bytesRead === readBefore) {
			closeLingering(socket, LINGER_MAX_MS, () => {});
		} else {
			// The client sent something since (a request answered meanwhile, or one still arriving): it may have more.
			readBefore = socket.bytesRead;
			setTimeout(look, FIRST_REQUEST_WAIT_MS);
		}
	};

	look();
}

const isHttp2 = (server: net.Server): boolean => typeof (server as {updateSettings?: unknown}).updateSettings === 'function';

/**
 * An HTTP/2 server's sessions, from its listen on. Node 20's close of an
 * HTTP/2 server leaves them open (its docs: call each session's close()), and
 * a client keeps its session, idle or sending new streams that the app still
 * serves: the worker stayed until the client left or the deadline killed it
 * (exit 3). Node keeps no list of them; a listener on 'session' (not
 * 'stream' or 'request', which a gRPC server's calls pass through) costs one
 * call a connection.
 */
const sessionsOf = new WeakMap<net.Server, Set<Http2Session>>();

function followSessions(server: net.Server): void {
	if (!isHttp2(server) || sessionsOf.has(server)) {
		return;
	}

	const sessions = new Set<Http2Session>();
	sessionsOf.set(server, sessions);
	server.on('session', (session: Http2Session) => {
		sessions.add(session);
		session.once('close', () => sessions.delete(session));
	});
}
