/**
 * Every server a cluster worker begins to listen on, whoever made it, seen as its
 * `listen()` asks node:cluster for the port (`cluster._getServer`, before anything is
 * bound), or, for `listen({exclusive: true})`, as it binds (`_listen2`). The drain
 * takes each it can; the rest (a raw `net` protocol, one left out) are followed here.
 */
import cluster from 'node:cluster';
import net from 'node:net';

type GetServer = (server: unknown, ...rest: unknown[]) => unknown;
type CloseCallback = (error?: Error) => void;

export interface ListeningServers {
	/** The servers the drain does not take, listening now or later, get a second close that succeeds. */
	drain(): void;
	/** Their connections are the app's. */
	stopListening(): void;
	follow(server: net.Server): void;
	forget(server: net.Server): void;
}

/** `apart`: one listens without node:cluster. */
export function followServers(take: (server: net.Server) => boolean, apart: (server: net.Server) => void): ListeningServers {
	const servers = new Set<net.Server>();
	let draining = false;
	const asked = new WeakSet<net.Server>();
	const host = cluster as unknown as {_getServer?: GetServer};
	const getServer = host._getServer;
	if (typeof getServer === 'function') {
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

		// node:net's own step that binds a server's handle, which a listen through
		// node:cluster reaches too.
		const listen2 = (net.Server.prototype as {_listen2?: (...args: unknown[]) => unknown})._listen2;
		if (typeof listen2 === 'function') {
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

/** As the primary logs node:cluster's: `host:port` (`[v6]:port`), or a socket's path. */
export function formatAddress(address: ReturnType<net.Server['address']>): string {
	if (address === null || typeof address === 'string') {
		return String(address);
	}

	return address.address.includes(':') ? `[${address.address}]:${address.port}` : `${address.address}:${address.port}`;
}

const wrapped = new WeakSet<net.Server>();

/**
 * The server stopped listening before the app's own shutdown closes it: Node's second
 * close would emit 'close' again and call back with ERR_SERVER_NOT_RUNNING (terminus
 * exits 1 on it). This one only calls back once the server has closed.
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
