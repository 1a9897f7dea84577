/**
 * `--max-connection-age`: a kept-alive connection stays on the pod it first
 * reached, so pods added by a scale-up get none of its traffic. Past its age a
 * connection is closed the graceful way of its protocol: HTTP/1.1 by
 * `Connection: close` on its next response, HTTP/2 by GOAWAY (http2-sessions.ts).
 * Each connection's age is drawn within ±10 %, as gRPC's MAX_CONNECTION_AGE
 * jitter (https://github.com/grpc/proposal/blob/master/A9-server-side-conn-mgt.md),
 * so one pod's connections do not all move at once. Off, nothing here runs.
 */
import type {IncomingMessage, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import {PEER_COUNTER, type Counted, type PeerCounter} from './arrivals.js';
import {claimLast, insistOnClose, type LingerAfterLast} from './http1-connections.js';
import {wantsEventStream} from './long-lived.js';

const AGE_JITTER = 0.1;

/** One connection's age: `maxAgeMs` ± 10 %. */
export const drawAge = (maxAgeMs: number, random: () => number = Math.random): number => Math.round(maxAgeMs * (1 - AGE_JITTER + (2 * AGE_JITTER * random())));

/** Set once the connection is past its age: its peer's counter, taken off `PEER_COUNTER`. */
const AGED = Symbol('graceful-cluster.aged');
type AgingSocket = Socket & Counted & {[AGED]?: PeerCounter};

/**
 * Ages an HTTP/1.1 connection. Serving costs a request one read of the socket's
 * `PEER_COUNTER`; at its age that counter is moved aside, so the connection's
 * next request takes the filter's slow path (`agedCounter`), and none before it pays.
 */
function ageConnection(socket: Socket, ageMs: number): void {
	const aging = socket as AgingSocket;
	const timer = setTimeout(() => {
		const counter = aging[PEER_COUNTER];
		if (counter !== undefined) {
			aging[AGED] = counter;
			aging[PEER_COUNTER] = undefined;
		}
	}, ageMs).unref();
	socket.once('close', () => {
		clearTimeout(timer);
	});
}

/** The peer's counter of a connection past its age; undefined for one not seen before. */
export const agedCounter = (socket: Socket): PeerCounter | undefined => (socket as AgingSocket)[AGED];

/** An HTTP/1.1 filter's connection ages: each counted from its first request. */
export class ConnectionAges {
	/** Connections given `Connection: close` for their age. */
	closed = 0;

	constructor(private readonly maxAgeMs: number, private readonly afterLast: LingerAfterLast) {}

	/** A connection's first request: its age starts. */
	start(socket: Socket): void {
		if (this.maxAgeMs > 0) {
			ageConnection(socket, drawAge(this.maxAgeMs));
		}
	}

	/**
	 * The next request on a connection past its age gets `Connection: close`. An event
	 * stream keeps its connection as long as it lasts: the close waits for a request after
	 * it. False for a request pipelined behind the close: it is not to run (Node would
	 * drop its response; the client retries it).
	 */
	close(request: IncomingMessage, response: ServerResponse): boolean {
		if (wantsEventStream(request.headers)) {
			return true;
		}

		if (!claimLast(request, this.afterLast)) {
			return false;
		}

		insistOnClose(response);
		this.closed++;
		return true;
	}
}
