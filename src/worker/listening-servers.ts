/**
 * Every server a cluster worker begins to listen on, seen as it asks
 * node:cluster for its port (`cluster._getServer`, called by `listen()`
 * before it binds anything, whoever made the server: the app, its framework,
 * a library), or, for one that binds its own port without node:cluster
 * (`listen({exclusive: true})`), as it binds it (`_listen2`, before its first
 * connection): the bootstrap hands each to the drain (`take`), which keeps the
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
	/**
	 * Those servers stop listening (node:cluster hands new connections to the
	 * other workers, and closes the port once they all have), as the drained
	 * ones do: when the drain's reject phase ends, or a reload retires the worker.
	 * Their connections are the app's.
	 */
	stopListening(): void;
	/** A server the app left out after the drain took it (`exclude()`): one of those from now on. */
	follow(server: net.Server): void;
	/** A server the app passed to attach() after all: the drain's, no longer one of those. */
	forget(server: net.Server): void;
}

/**
 * Follows the worker's servers from its first `listen()`; `take` says whether
 * the drain has one. A no-op where node:cluster has no `_getServer` (another Node).
 */
export function followServers(take: (server: net.Server) => boolean, apart: (server: net.Server) => void): ListeningServers {
	const servers = new Set<net.Server>();
	let draining = false;
	/** The servers that asked node:cluster for their port. */
	const asked = new WeakSet<net.Server>();
	const host = cluster as unknown as {_getServer?: GetServer};
	const getServer = host._getServer;
	if (typeof getServer === 'function') {
		// eslint-disable-next-line func-names
		host._getServer = function (this: unknown, server: unknown, ...rest: unknown[]): unknown {
			// A dgram socket asks too: not a server of ours.
			if (server instanceof net.Server) {
				asked.add(server);
				if (!take(server)) {
					follow(server);
				}
			}

			return Reflect.apply(getServer, this, [server, ...rest]);
		};

		// node:net's own step that binds a server's handle (`setupListenHandle`),
		// which a listen through node:cluster reaches too, once it has its port.
		const listen2 = (net.Server.prototype as {_listen2?: (...args: unknown[]) => unknown})._listen2;
		if (typeof listen2 === 'function') {
			// eslint-disable-next-line func-names
			(net.Server.prototype as {_listen2?: unknown})._listen2 = function (this: net.Server, ...args: unknown[]): unknown {
				if (!asked.has(this)) {
					asked.add(this);
					if (!take(this)) {
						follow(this);
					}

					apart(this);
				}

				return Reflect.apply(listen2, this, args);
			};
		}
	}

	const follow = (server: net.Server): void => {
		if (!servers.has(server)) {
			servers.add(server);
			if (draining) {
				closeAgainSucceeds(server);
			}
		}
	};

	return {
		follow,
		forget(server) {
			servers.delete(server);
		},
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

/** A listening server's address as the primary logs node:cluster's: `host:port` (`[v6]:port`), or a socket's path. */
export function formatAddress(address: ReturnType<net.Server['address']>): string {
	if (address === null || typeof address === 'string') {
		return String(address);
	}

	return address.address.includes(':') ? `[${address.address}]:${address.port}` : `${address.address}:${address.port}`;
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
