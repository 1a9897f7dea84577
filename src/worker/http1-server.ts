/**
 * What the HTTP/1.1 filter changes on the server itself: its `close()` and its
 * keep-alive timeouts. After the drain stopped the server, the app's own shutdown
 * closes it again (or closes one that never listened), and that close must call back
 * without `ERR_SERVER_NOT_RUNNING`, on which terminus exits 1 and http-terminator
 * skips the rest of its handler.
 */
import type {Server} from 'node:http';

type CloseCallback = (error?: Error) => void;

type CloseState =
	| {readonly name: 'open'}
	/** The drain stopped before the server listened (the app waits for its database): closed as it listens. */
	| {readonly name: 'close-on-listen'; readonly keepIdle: boolean}
	| {readonly name: 'closed'; emitted: boolean};

type Timeouts = Pick<Server, 'keepAliveTimeout' | 'headersTimeout' | 'requestTimeout'>;

export class ServerClose {
	private state: CloseState = {name: 'open'};
	private readonly original: Server['close'];
	/** A `close` of its own (the app's, a library's wrapper) before ours. */
	private readonly own: boolean;
	/** Not listening now, having listened: the app closed it itself. */
	private hasListened: boolean;
	private readonly ownTimeouts: Timeouts | undefined;

	constructor(private readonly server: Server, keepAliveTimeoutMs: number, private readonly lateListen: (keepIdle: boolean) => void) {
		this.hasListened = server.listening;
		server.once('listening', this.listened);
		this.original = server.close;
		this.own = Object.hasOwn(server, 'close');
		this.ownTimeouts = tuneKeepAlive(server, keepAliveTimeoutMs);
		const close = this;
		server.close = function (this: Server, ...args: unknown[]): Server {
			const callback = args[0] as CloseCallback | undefined;
			if (close.state.name === 'closed') {
				return close.again(callback);
			}

			if (close.state.name === 'close-on-listen' && !this.listening) {
				return close.unopened(callback);
			}

			return Reflect.apply(close.original, this, args) as Server;
		} as Server['close'];
	}

	/** A server the app closed itself is left as it is; one that has not listened yet is stopped as soon as it does. */
	stop(keepIdle: boolean, closeNow: () => void): void {
		const {server, state} = this;
		if (state.name === 'closed' || (!server.listening && this.hasListened)) {
			return;
		}

		if (!server.listening) {
			if (state.name === 'open') {
				this.state = {name: 'close-on-listen', keepIdle};
				server.once('listening', this.onLateListen);
			}

			return;
		}

		const closed = {name: 'closed' as const, emitted: false};
		this.state = closed;
		server.once('close', () => {
			closed.emitted = true;
		});
		closeNow();
	}

	closeOriginal(): void {
		Reflect.apply(this.original, this.server, []);
	}

	restore(): void {
		if (this.own) {
			this.server.close = this.original;
		} else {
			delete (this.server as Partial<Server>).close;
		}

		if (this.ownTimeouts) {
			Object.assign(this.server, this.ownTimeouts);
		}

		this.server.removeListener('listening', this.onLateListen);
		this.server.removeListener('listening', this.listened);
		this.state = {name: 'open'};
	}

	private readonly listened = (): void => {
		this.hasListened = true;
	};

	private readonly onLateListen = (): void => {
		if (this.state.name === 'close-on-listen') {
			const {keepIdle} = this.state;
			this.state = {name: 'open'};
			this.lateListen(keepIdle);
		}
	};

	/** Closing it is the drain's job now, so the callback hears the drain's close. */
	private unopened(callback?: CloseCallback): Server {
		if (callback) {
			this.server.once('close', () => {
				callback();
			});
		}

		return Reflect.apply(this.original, this.server, []) as Server;
	}

	private again(callback?: CloseCallback): Server {
		if (callback) {
			if (this.state.name === 'closed' && this.state.emitted) {
				process.nextTick(callback);
			} else {
				this.server.once('close', () => {
					callback();
				});
			}
		}

		return this.server;
	}
}

/**
 * Node answers 408 to a client whose headers take longer than headersTimeout: below
 * keepAliveTimeout that would hit an idle connection's next request (nodejs/node#27363).
 */
function tuneKeepAlive(server: Server, keepAliveTimeoutMs: number): Timeouts | undefined {
	if (keepAliveTimeoutMs <= 0) {
		return undefined;
	}

	const own = {keepAliveTimeout: server.keepAliveTimeout, headersTimeout: server.headersTimeout, requestTimeout: server.requestTimeout};
	server.keepAliveTimeout = keepAliveTimeoutMs;
	if (server.headersTimeout <= keepAliveTimeoutMs) {
		server.headersTimeout = keepAliveTimeoutMs + 1000;
	}

	if (server.requestTimeout > 0 && server.requestTimeout < server.headersTimeout) {
		server.requestTimeout = server.headersTimeout;
	}

	return own;
}
