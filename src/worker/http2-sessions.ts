/**
 * How an HTTP/2 server's connections end during a drain. HTTP/2 has no
 * `Connection: close` (RFC 9113 section 8.2.2): a connection ends with GOAWAY (RFC
 * 9113 section 6.8), per session, in the steps of SessionStage. `server.close()`
 * alone sends no GOAWAY and leaves sessions taking new streams. Nothing here runs
 * per stream.
 */
import type {ServerHttp2Session} from 'node:http2';
import {drawAge} from './connection-age.js';

const NO_ERROR = 0;
/** A GOAWAY carrying the largest stream id refuses no stream yet, it only announces the end (RFC 9113 section 6.8). */
const MAX_STREAM_ID = 2 ** 31 - 1;

/**
 * A round trip's allowance, as Go's HTTP/2 server (1 s) and Envoy's `drain_timeout`
 * give. Short on purpose: once a GOAWAY has gone out, nghttp2 stops reading a session
 * with no stream open (`nghttp2_session_want_read()`), so a stream sent before the
 * notice arrived waits unread until the final GOAWAY refuses it (REFUSED_STREAM, safe
 * to retry).
 */
export const SHUTDOWN_NOTICE_MS = 1000;

/** Each step at most once, never back. Absent on the session is `'open'`. */
export type SessionStage =
	| 'open'
	/**
	 * GOAWAY(NO_ERROR, 2^31-1), the shutdown notice. RFC 9113 lets streams already on
	 * their way be taken; nghttp2 does not: it ignores new streams once any GOAWAY went
	 * out, and the final GOAWAY refuses them (REFUSED_STREAM, retried elsewhere). A session
	 * opened during the drain gets it on its first stream: sent at connect, it would
	 * stop nghttp2 reading that stream.
	 */
	| 'notified'
	/** `session.close()`: the final GOAWAY; streams in flight finish, later ones are refused. */
	| 'closing'
	/** `session.destroy()`: a GOAWAY, then the socket ends. */
	| 'destroyed';

const STAGE_ORDER: readonly SessionStage[] = ['open', 'notified', 'closing', 'destroyed'];
const SESSION_STAGE = Symbol('graceful-cluster.sessionStage');
type TrackedSession = ServerHttp2Session & {[SESSION_STAGE]?: SessionStage};

export class Sessions {
	/** What every session, a new one too, is told at least. */
	private floor: SessionStage = 'open';
	private readonly open = new Set<TrackedSession>();
	private readonly noticed: Array<{readonly session: TrackedSession; readonly at: number}> = [];
	private noticeTimer: NodeJS.Timeout | undefined;
	private readonly onSessionClose: (this: ServerHttp2Session) => void;
	/** Sessions closed for their age (`--max-connection-age`). */
	aged = 0;

	/** `maxAgeMs`: `--max-connection-age`, 0 for off. */
	constructor(private readonly maxAgeMs = 0) {
		const sessions = this;
		this.onSessionClose = function (this: ServerHttp2Session) {
			sessions.open.delete(this);
		};
	}

	get size(): number {
		return this.open.size;
	}

	readonly add = (session: ServerHttp2Session): void => {
		this.open.add(session);
		session.on('close', this.onSessionClose);
		this.tell(session, this.floor);
		if (this.maxAgeMs > 0) {
			this.age(session);
		}
	};

	/**
	 * Past its age a session gets the drain's two GOAWAYs: the notice, then after a
	 * round trip's allowance its last stream (`endNotices`); its streams finish. One a
	 * drain reached first is left to the drain.
	 */
	private age(session: TrackedSession): void {
		const timer = setTimeout(() => {
			if ((session[SESSION_STAGE] ?? 'open') === 'open' && !session.closed && !session.destroyed) {
				this.aged++;
				this.tell(session, 'notified');
			}
		}, drawAge(this.maxAgeMs)).unref();
		session.once('close', () => {
			clearTimeout(timer);
		});
	}

	/** A session opened since the drain began gets its notice now, while this stream keeps nghttp2 reading. */
	streamDuringDrain(session: ServerHttp2Session | undefined): void {
		if (session !== undefined && (session as TrackedSession)[SESSION_STAGE] === undefined) {
			this.tell(session, 'notified');
		}
	}

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

	clear(): void {
		clearTimeout(this.noticeTimer);
		for (const session of this.open) {
			session.removeListener('close', this.onSessionClose);
		}

		this.open.clear();
	}

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
