/** The HTTP/1.1 answers the drain writes itself, never the app: each a whole response whose headers end the connection. */
import type {IncomingMessage, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';
import {claimLast, isClosing, type LingerAfterLast} from './http1-connections.js';
import {eventStreamRetryBody, ignoreError, RETIRE_RETRY_MS, wantsEventStream} from './long-lived.js';
import {rawServiceUnavailable, REJECT_BODY, SHED_BODY} from '../reject-answer.js';

export interface Answer {
	readonly status: number;
	readonly headers: string[];
	readonly body: Buffer;
}

function eventStreamHeaders(body: Buffer): string[] {
	return [
		'Connection', 'close',
		'Content-Type', 'text/event-stream',
		'Content-Length', String(body.length),
		'Cache-Control', 'no-store',
	];
}

const eventStream = (body: Buffer): Answer => ({status: 200, headers: eventStreamHeaders(body), body});

export const RETIRE_UPGRADE_BODY = Buffer.from('Service Unavailable: this worker is being replaced, retry now on a new connection.\n');
export const RETIRE_STREAM = eventStream(eventStreamRetryBody(RETIRE_RETRY_MS));
/**
 * On a connection kept for the linger: handed to the app, the socket would open, be
 * closed with 1012 as the linger ends and reconnect then; answered now, the client
 * reconnects at once to a worker that stays (socket.io, reconnecting-websocket and ws
 * retry a failed handshake as a 1012). A browser's script sees a 1006, not a clean close.
 */
export const RETIRE_UPGRADE_BYTES = rawServiceUnavailable(0, RETIRE_UPGRADE_BODY);

/** `close`: the connection ends after it; `client`: as the request asked (Node's keep-alive rules). */
const serviceUnavailable = (retryAfterSeconds: number, body: Buffer, connection: 'close' | 'client' = 'close'): Answer => ({
	status: 503,
	headers: [
		...(connection === 'close' ? ['Connection', 'close'] : []),
		'Retry-After', String(retryAfterSeconds),
		'Content-Type', 'text/plain; charset=utf-8',
		'Content-Length', String(body.length),
		'Cache-Control', 'no-store',
	],
	body,
});

export class DrainAnswers {
	readonly reject: Answer;
	/** EventSource never retries a 503: a 200 that ends at once after `retry:`. */
	readonly eventStream: Answer;
	readonly rejectUpgrade: Buffer;
	/**
	 * `--max-event-loop-delay`: a 503 with its own body that keeps the connection, unless
	 * the client asked for its end (HTTP/1.0, `Connection: close`). A
	 * close would send each shed client back through node:cluster's hand-off, which
	 * waits on this busy worker's loop for every new connection: at 4x capacity a third
	 * of the requests then timed out, none with the connection kept (bench/capacity.js).
	 */
	readonly shed: Answer;
	/** The same, closing: after a request whose body may still come (`Expect: 100-continue`). */
	readonly shedClosing: Answer;
	readonly shedUpgrade: Buffer;

	constructor(retryAfterSeconds: number) {
		this.reject = serviceUnavailable(retryAfterSeconds, REJECT_BODY);
		this.shed = serviceUnavailable(retryAfterSeconds, SHED_BODY, 'client');
		this.shedClosing = serviceUnavailable(retryAfterSeconds, SHED_BODY);
		this.shedUpgrade = rawServiceUnavailable(retryAfterSeconds, SHED_BODY);
		this.eventStream = eventStream(eventStreamRetryBody(retryAfterSeconds * 1000));
		this.rejectUpgrade = rawServiceUnavailable(retryAfterSeconds, REJECT_BODY);
	}
}

function hasBody(request: IncomingMessage): boolean {
	const {headers} = request;
	return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

/** `expectingContinue`: an `Expect: 100-continue` request that got no `100`, so no body comes. */
export function answerHere(request: IncomingMessage, response: ServerResponse, {status, headers, body}: Answer, expectingContinue: boolean, written?: () => void): void {
	response.writeHead(status, headers);
	if (hasBody(request) && !expectingContinue) {
		// Answer at once, but close only after reading the body: closing a socket with unread
		// data in it sends an RST, and a client still uploading sees a reset instead of the
		// 503 (RFC 9112 section 9.6). A body that never ends holds 'finish', not the answer.
		response.write(body, written && (error => {
			if (!error) {
				written();
			}
		}));
		request.once('end', () => response.end());
		request.resume();
	} else {
		// Node discards whatever arrives before it closes the connection.
		if (written) {
			response.once('finish', written);
		}

		response.end(body);
	}
}

/**
 * `--max-event-loop-delay`'s answer: the 503 that keeps its connection (`DrainAnswers.shed`),
 * or, after a request whose body may still come or for an event stream, one that ends it.
 * Not an arrival: those are the drain's. False: a request pipelined behind that end, not answered.
 */
export function answerShed(request: IncomingMessage, response: ServerResponse, answers: DrainAnswers, expectingContinue: boolean, afterLast: LingerAfterLast): boolean {
	// Behind a response that ends the connection: not run, not answered (the client retries it).
	if (isClosing(request.socket)) {
		request.resume();
		return false;
	}

	if (!expectingContinue && !wantsEventStream(request.headers)) {
		answerHere(request, response, answers.shed, false);
		return true;
	}

	if (!claimLast(request, afterLast)) {
		return false;
	}

	answerHere(request, response, expectingContinue ? answers.shedClosing : answers.eventStream, expectingContinue);
	return true;
}

/** Node took its own listeners off the socket before emitting 'upgrade'. */
export function answerUpgrade(socket: Socket, bytes: Buffer, written?: () => void): void {
	socket.on('error', ignoreError);
	socket.end(bytes, () => {
		written?.();
		socket.destroy();
	});
}

export function answerProbe(response: ServerResponse, {status, body}: {readonly status: number; readonly body: Buffer}, closing: boolean): void {
	response.writeHead(status, {
		'Content-Type': 'text/plain; charset=utf-8',
		'Content-Length': body.length,
		'Cache-Control': 'no-store',
		...(closing ? {Connection: 'close'} : {}),
	});
	response.end(body);
}
