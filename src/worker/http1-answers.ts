/**
 * The HTTP/1.1 answers the drain writes itself, the app never called
 * (http1-filter.ts): the drain 503, its event-stream form, the answers of a
 * retiring worker, each a whole response whose headers end the connection.
 */
import type {IncomingMessage, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import {eventStreamRetryBody, ignoreError, RETIRE_RETRY_MS} from './long-lived.js';
import {rawServiceUnavailable, REJECT_BODY} from '../reject-answer.js';

/** A whole answer: its status, its raw header block, its body. */
export interface Answer {
	readonly status: number;
	readonly headers: string[];
	readonly body: Buffer;
}

/** The raw header block of a 200 event stream of `body`, ending the connection after it. */
function eventStreamHeaders(body: Buffer): string[] {
	return [
		'Connection', 'close',
		'Content-Type', 'text/event-stream',
		'Content-Length', String(body.length),
		'Cache-Control', 'no-store',
	];
}

const eventStream = (body: Buffer): Answer => ({status: 200, headers: eventStreamHeaders(body), body});

/** The body of a retiring worker's answer to a WebSocket handshake. */
export const RETIRE_UPGRADE_BODY = Buffer.from('Service Unavailable: this worker is being replaced, retry now on a new connection.\n');
/** What a retiring worker answers a new event stream with: reconnect soon (long-lived.ts RETIRE_RETRY_MS). */
export const RETIRE_STREAM = eventStream(eventStreamRetryBody(RETIRE_RETRY_MS));
/**
 * A retiring worker's answer to a WebSocket handshake on a connection it kept
 * for its linger: `Retry-After: 0`, the other workers are serving. Handed to the
 * app, the socket would open, be closed with 1012 as the linger ends and
 * reconnect then; answered now, the client reconnects at once, to a worker that
 * stays (socket.io, reconnecting-websocket and ws retry loops retry a failed
 * handshake as a 1012). A browser's script sees a 1006, not a clean close.
 */
export const RETIRE_UPGRADE_BYTES = rawServiceUnavailable(0, RETIRE_UPGRADE_BODY);

/** The drain's answers for one `--retry-after`, made once per filter. */
export class DrainAnswers {
	/** The drain 503: `Connection: close`, `Retry-After`. */
	readonly reject: Answer;
	/** For a new event stream: a 200 that ends at once after `retry:` (EventSource never retries a 503); the whole pod is going away. */
	readonly eventStream: Answer;
	/** The drain 503 on a WebSocket handshake's raw socket. */
	readonly rejectUpgrade: Buffer;

	constructor(retryAfterSeconds: number) {
		this.reject = {
			status: 503,
			headers: [
				'Connection', 'close',
				'Retry-After', String(retryAfterSeconds),
				'Content-Type', 'text/plain; charset=utf-8',
				'Content-Length', String(REJECT_BODY.length),
				'Cache-Control', 'no-store',
			],
			body: REJECT_BODY,
		};
		this.eventStream = eventStream(eventStreamRetryBody(retryAfterSeconds * 1000));
		this.rejectUpgrade = rawServiceUnavailable(retryAfterSeconds, REJECT_BODY);
	}
}

/** True when the request carries a body (which may still be arriving). */
function hasBody(request: IncomingMessage): boolean {
	const {headers} = request;
	return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

/**
 * Writes `answer` whole; a request body still arriving is read first.
 * `expectingContinue`: an `Expect: 100-continue` request that got no `100`, so
 * no body comes. `written`: once the answer is out.
 */
export function answerHere(request: IncomingMessage, response: ServerResponse, {status, headers, body}: Answer, expectingContinue: boolean, written?: () => void): void {
	response.writeHead(status, headers);
	if (hasBody(request) && !expectingContinue) {
		// Answer at once, but close only after reading the body: closing a socket
		// with unread data in it sends an RST, and a client still uploading sees
		// EPIPE or a reset instead of the 503 (RFC 9112 section 9.6). The answer
		// is whole once this write is out: a body that never ends (a client that
		// stalls mid-upload) holds the response's 'finish', not the answer.
		response.write(body, written && (error => {
			if (!error) {
				written();
			}
		}));
		request.once('end', () => response.end());
		request.resume();
	} else {
		// With `Expect: 100-continue` no body comes: the 503 is the final answer,
		// and Node discards whatever arrives before it closes the connection.
		if (written) {
			response.once('finish', written);
		}

		response.end(body);
	}
}

/**
 * Answers an upgrade on its raw socket with `bytes`, then closes it; `written`
 * once they were handed to the OS. Node took its own listeners off the socket
 * before emitting 'upgrade'.
 */
export function answerUpgrade(socket: Socket, bytes: Buffer, written?: () => void): void {
	socket.on('error', ignoreError);
	socket.end(bytes, () => {
		written?.();
		socket.destroy();
	});
}

/** A probe's answer (probes.ts); `closing`: during a drain, the connection ends after it. */
export function answerProbe(response: ServerResponse, {status, body}: {readonly status: number; readonly body: Buffer}, closing: boolean): void {
	response.writeHead(status, {
		'Content-Type': 'text/plain; charset=utf-8',
		'Content-Length': body.length,
		'Cache-Control': 'no-store',
		...(closing ? {Connection: 'close'} : {}),
	});
	response.end(body);
}
