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
 *   `closeAgain`). Node's own second close is still made, without the
 *   callback: it closes the connections idle by then and emits `'close'`
 *   again if nothing is left.
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
import {ServerResponse, type IncomingMessage} from 'node:http';
import net from 'node:net';

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
			for (const server of drained) {
				server.close();
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
	endInFlight(server);
	// Whatever `close` is in place (an own one of a library's included) stays
	// the one called; ours decides only what the callback hears.
	const close = server.close;
	// eslint-disable-next-line func-names
	server.close = function (this: net.Server, ...args: unknown[]): net.Server {
		const callback = typeof args[0] === 'function' ? args[0] as CloseCallback : undefined;
		if (this.listening || !callback) {
			// A first close, or one without a callback: Node's own, unchanged.
			endInFlight(this);
			return Reflect.apply(close, this, args) as net.Server;
		}

		// Closed already: the callback hears the close itself, not an error.
		this.once('close', () => {
			callback();
		});
		return Reflect.apply(close, this, []) as net.Server;
	} as net.Server['close'];
}

/**
 * An HTTP/1 server's connections end after their next response, when that
 * closes them cleanly: a request with no body, by an idempotent method.
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
	if (typeof (server as {updateSettings?: unknown}).updateSettings === 'function') {
		return;
	}

	server.prependListener('request', (request: IncomingMessage, response: unknown) => {
		// An HTTP/2 server's compatibility response would refuse the header.
		if (response instanceof ServerResponse && !response.headersSent && endsCleanly(request)) {
			response.setHeader('Connection', 'close');
		}
	});
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
 * node:http keeps its connections under an internal symbol; without it (another
 * Node), nothing is done.
 */
function endInFlight(server: net.Server): void {
	const key = Object.getOwnPropertySymbols(server).find(symbol => symbol.description === 'http.server.connections');
	const connections = key === undefined ? undefined : (server as unknown as Record<symbol, {all?: () => Array<{socket?: {_httpMessage?: unknown} | null}>} | undefined>)[key];
	for (const parser of connections?.all?.() ?? []) {
		const response = parser.socket?._httpMessage;
		if (response instanceof ServerResponse && !response.headersSent && response.req.complete) {
			response.setHeader('Connection', 'close');
		}
	}
}
