/**
 * Every server a cluster worker begins to listen on, seen as it asks
 * node:cluster for its port (`cluster._getServer`, called by `listen()`
 * before it binds anything, whoever made the server: the app, its framework,
 * a library): the bootstrap hands each to the drain (`take`), which keeps the
 * HTTP ones. The rest, a raw `net` protocol or a server the app left out, are
 * the app's: node:cluster closes them when the primary disconnects a worker
 * with nothing to drain, and the app's own shutdown closing one again then
 * succeeds instead of failing with `ERR_SERVER_NOT_RUNNING` (below).
 */
import cluster from 'node:cluster';
import net from 'node:net';

type GetServer = (server: unknown, ...rest: unknown[]) => unknown;
type CloseCallback = (error?: Error) => void;

export interface ListeningServers {
	/** The drain began: the servers it does not take, listening now or later, get a second close that succeeds. */
	drain(): void;
	/** A reload retires this worker: those servers stop listening now (node:cluster hands new connections to the others). */
	stopListening(): void;
}

/**
 * Follows the worker's servers from its first `listen()`; `take` says whether
 * the drain has one. A no-op where node:cluster has no `_getServer` (another Node).
 */
export function followServers(take: (server: net.Server) => boolean): ListeningServers {
	const servers = new Set<net.Server>();
	let draining = false;
	const host = cluster as unknown as {_getServer?: GetServer};
	const getServer = host._getServer;
	if (typeof getServer === 'function') {
		// eslint-disable-next-line func-names
		host._getServer = function (this: unknown, server: unknown, ...rest: unknown[]): unknown {
			// A dgram socket asks too: not a server of ours.
			if (server instanceof net.Server && !take(server) && !servers.has(server)) {
				servers.add(server);
				if (draining) {
					closeAgainSucceeds(server);
				}
			}

			return Reflect.apply(getServer, this, [server, ...rest]);
		};
	}

	return {
		drain() {
			if (!draining) {
				draining = true;
				for (const server of servers) {
					closeAgainSucceeds(server);
				}
			}
		},
		stopListening() {
			for (const server of servers) {
				if (server.listening) {
					// net's own close: node:http's would close the idle connections at once too.
					Reflect.apply(net.Server.prototype.close, server, []);
				}
			}
		},
	};
}

const wrapped = new WeakSet<net.Server>();

/**
 * node:cluster's disconnect closes the server before the app's own shutdown
 * runs; Node's second close would emit 'close' again (an app that ends its
 * pool there ends it twice) and call back with ERR_SERVER_NOT_RUNNING, which
 * made terminus exit 1 and http-terminator skip the rest of its handler. A
 * close of a server that is not listening any more calls back once it has
 * closed, and does nothing else.
 */
function closeAgainSucceeds(server: net.Server): void {
	if (wrapped.has(server)) {
		return;
	}

	wrapped.add(server);
	let state: 'unopened' | 'open' | 'closed' = server.listening ? 'open' : 'unopened';
	server.on('listening', () => {
		state = 'open';
	});
	server.on('close', () => {
		state = 'closed';
	});
	// Whatever `close` is in place (a library's own included) stays the one a first close calls.
	const close = server.close;
	// eslint-disable-next-line func-names
	server.close = function (this: net.Server, ...args: unknown[]): net.Server {
		if (this.listening || state === 'unopened') {
			return Reflect.apply(close, this, args) as net.Server;
		}

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
