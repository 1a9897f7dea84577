/**
 * What the HTTP/1.1 filter changes on the server itself (http1-filter.ts): its
 * `close()`, and its keep-alive timeouts. The drain stops the server listening
 * (`stop`); the app's own shutdown then closes it again, or closes one that had
 * not listened yet when the drain stopped, and either close calls back without
 * `ERR_SERVER_NOT_RUNNING` (on which terminus exits 1 and http-terminator skips
 * the rest of its handler). `restore` gives the server back as it was.
 */
import type {Server} from 'node:http';

type CloseCallback = (error?: Error) => void;

/** The server's close as the drain stands with it. */
type CloseState =
	/** Not stopped by the drain: the app's close is Node's. */
	| {readonly name: 'open'}
	/** The drain stopped before the server listened (the app waits for its database): closed as it listens. */
	| {readonly name: 'close-on-listen'; readonly keepIdle: boolean}
	/** Stopped by the drain; `emitted` once its 'close' is out. */
	| {readonly name: 'closed'; emitted: boolean};

type Timeouts = Pick<Server, 'keepAliveTimeout' | 'headersTimeout' | 'requestTimeout'>;

export class ServerClose {
	private state: CloseState = {name: 'open'};
	private readonly original: Server['close'];
	/** The server had a `close` of its own (the app's, a library's wrapper) before ours. */
	private readonly own: boolean;
	/** Not listening now, having listened: the app closed it itself. */
	private hasListened: boolean;
	/** The server's own timeouts, given back by `restore`; undefined when left alone. */
	private readonly ownTimeouts: Timeouts | undefined;

	/** `lateListen`: the server listened after the drain had stopped it; stop it again now. */
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

	/**
	 * The drain stops the server taking connections: `closeNow` closes it, once;
	 * a server the app closed itself is left as it is, and one that has not
	 * listened yet is stopped as soon as it does.
	 */
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

	/** Node's own close of the server (its idle connections closed at once). */
	closeOriginal(): void {
		Reflect.apply(this.original, this.server, []);
	}

	/** Gives the server its own `close` and timeouts back. */
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

	/**
	 * `close(callback)` on a server that has not listened, once the drain has
	 * stopped accepting: closing it is the drain's job now, so the callback
	 * hears the close (and the close once more should a listen under way
	 * complete: the drain closes it then).
	 */
	private unopened(callback?: CloseCallback): Server {
		if (callback) {
			this.server.once('close', () => {
				callback();
			});
		}

		return Reflect.apply(this.original, this.server, []) as Server;
	}

	/** `close(callback)` once the drain closed the server: the callback once it has closed, nothing else. */
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
 * `--keep-alive-timeout` on the server; returns its own timeouts, or undefined
 * when 0 leaves them. Node answers 408 to a client whose headers take longer
 * than headersTimeout: below keepAliveTimeout that would hit an idle
 * connection's next request (nodejs/node#27363).
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
