/**
 * How an HTTP/2 server's connections end during a drain. HTTP/2 has no
 * `Connection: close` (a connection-specific header: RFC 9113 section 8.2.2;
 * Node drops it with an UnsupportedWarning): a connection is ended with GOAWAY
 * (RFC 9113 section 6.8), sent per session, in the steps of SessionStage: the
 * shutdown notice at the drain's start, the final GOAWAY a second later (at
 * once, for a session that opens after listening stopped), and a destroy once
 * nothing is in flight. `server.close()` alone sends no GOAWAY and leaves
 * sessions taking new streams.
 *
 * Sessions are tracked per connection, on the server's `'session'` event;
 * nothing here runs per stream.
 */
import type {ServerHttp2Session} from 'node:http2';

/** GOAWAY's error code for a graceful shutdown (RFC 9113 section 7). */
const NO_ERROR = 0;
/** The largest stream id: a GOAWAY carrying it refuses no stream yet, it only announces the end (RFC 9113 section 6.8). */
const MAX_STREAM_ID = 2 ** 31 - 1;

/**
 * The time between a session's shutdown notice and its final GOAWAY: a round
 * trip's allowance, as Go's HTTP/2 server (1 s) and Envoy's `drain_timeout` give.
 * Short on purpose: once a GOAWAY has gone out, nghttp2 stops reading a session
 * with no stream open (`nghttp2_session_want_read()`), so a stream the client
 * sent before the notice reached it waits unread until the final GOAWAY refuses
 * it (REFUSED_STREAM: not processed, safe to retry). Verified on Node 20.20.
 */
export const SHUTDOWN_NOTICE_MS = 1000;

/**
 * What a session has been told, in order; each step at most once, never back.
 * Stored on the session (SESSION_STAGE): absent is `'open'`.
 */
export type SessionStage =
	/** Serving: nothing. */
	| 'open'
	/**
	 * GOAWAY(NO_ERROR, 2^31-1), the shutdown notice (RFC 9113 section 6.8): open
	 * new streams on a new connection. What RFC 9113 allows (streams already on
	 * their way are taken) Node does not do: once a session has sent any GOAWAY,
	 * nghttp2 ignores the client's new streams, and the final GOAWAY refuses them
	 * (REFUSED_STREAM, which a client retries elsewhere; a unit test of
	 * http2-filter pins it). Sent at the drain's start, or on the first stream of a session opened
	 * during the drain (sent at connect, it would stop nghttp2 reading the
	 * client's first stream: see SHUTDOWN_NOTICE_MS). The final GOAWAY follows
	 * SHUTDOWN_NOTICE_MS later.
	 */
	| 'notified'
	/**
	 * `session.close()`: the final GOAWAY with the last stream id taken; streams
	 * in flight finish, then the session closes. A later stream is refused by
	 * nghttp2 (the client knows it was not processed).
	 */
	| 'closing'
	/** Nothing in flight any more: `session.destroy()` (a GOAWAY, then the socket ends). */
	| 'destroyed';

const STAGE_ORDER: readonly SessionStage[] = ['open', 'notified', 'closing', 'destroyed'];
const SESSION_STAGE = Symbol('graceful-cluster.sessionStage');
type TrackedSession = ServerHttp2Session & {[SESSION_STAGE]?: SessionStage};

/** The sessions of one HTTP/2 server, and what each has been told. */
export class Sessions {
	/** What every session, a new one too, is told at least: `'closing'` once listening stopped. */
	private floor: SessionStage = 'open';
	private readonly open = new Set<TrackedSession>();
	/** Notified sessions waiting for their final GOAWAY, oldest first, with when they were notified. */
	private readonly noticed: Array<{readonly session: TrackedSession; readonly at: number}> = [];
	private noticeTimer: NodeJS.Timeout | undefined;
	private readonly onSessionClose: (this: ServerHttp2Session) => void;

	constructor() {
		const sessions = this;
		this.onSessionClose = function (this: ServerHttp2Session) {
			sessions.open.delete(this);
		};
	}

	/** Sessions open now; for tests and logs. */
	get size(): number {
		return this.open.size;
	}

	/** The server's `'session'` listener: a new connection, told what every session has been told. */
	readonly add = (session: ServerHttp2Session): void => {
		this.open.add(session);
		session.on('close', this.onSessionClose);
		this.tell(session, this.floor);
	};

	/**
	 * A stream arrived during the drain: a session opened since the drain began
	 * gets its notice now, while that stream keeps nghttp2 reading.
	 */
	streamDuringDrain(session: ServerHttp2Session | undefined): void {
		if (session !== undefined && (session as TrackedSession)[SESSION_STAGE] === undefined) {
			this.tell(session, 'notified');
		}
	}

	/** Moves every session, and each new one from now on, on to `stage`. */
	raiseFloor(stage: SessionStage): void {
		if (STAGE_ORDER.indexOf(stage) > STAGE_ORDER.indexOf(this.floor) && stage !== 'notified') {
			this.floor = stage;
		}

		for (const session of this.open) {
			this.tell(session, stage);
		}

		if (stage === 'destroyed') {
			clearTimeout(this.noticeTimer);
		}
	}

	/** Stops tracking: the filter is taken off. */
	clear(): void {
		clearTimeout(this.noticeTimer);
		for (const session of this.open) {
			session.removeListener('close', this.onSessionClose);
		}

		this.open.clear();
	}

	/** Moves `session` on to `stage` (nothing if it is there or further already). */
	private tell(session: TrackedSession, stage: SessionStage): void {
		if (STAGE_ORDER.indexOf(stage) <= STAGE_ORDER.indexOf(session[SESSION_STAGE] ?? 'open')) {
			return;
		}

		session[SESSION_STAGE] = stage;
		switch (stage) {
			case 'open': {
				break;
			}

			case 'notified': {
				// goaway() throws on a destroyed session.
				if (!session.closed && !session.destroyed) {
					session.goaway(NO_ERROR, MAX_STREAM_ID);
					this.noticed.push({session, at: performance.now()});
					this.noticeTimer ??= setTimeout(this.endNotices, SHUTDOWN_NOTICE_MS).unref();
				}

				break;
			}

			case 'closing': {
				session.close();
				break;
			}

			case 'destroyed': {
				session.destroy();
				break;
			}

			default: {
				const never: never = stage;
				throw new Error(`unknown session stage ${String(never)}`);
			}
		}
	}

	/** The final GOAWAY for every session notified SHUTDOWN_NOTICE_MS ago or more; the timer re-armed for the next. */
	private readonly endNotices = (): void => {
		this.noticeTimer = undefined;
		const now = performance.now();
		while (this.noticed.length > 0 && now - this.noticed[0]!.at >= SHUTDOWN_NOTICE_MS - 1) {
			this.tell(this.noticed.shift()!.session, 'closing');
		}

		if (this.noticed.length > 0) {
			this.noticeTimer = setTimeout(this.endNotices, SHUTDOWN_NOTICE_MS - (now - this.noticed[0]!.at)).unref();
		}
	};
}
