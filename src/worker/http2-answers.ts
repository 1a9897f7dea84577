/**
 * The HTTP/2 answers the drain writes itself, never the app. No `connection` header:
 * connection-specific headers are malformed in HTTP/2 (RFC 9113 section 8.2.2).
 */
import process from 'node:process';
import type {OutgoingHttpHeaders, ServerHttp2Stream} from 'node:http2';
import {RETIRE_UPGRADE_BODY} from './http1-answers.js';
import {eventStreamRetryBody, ignoreError, RETIRE_RETRY_MS} from './long-lived.js';
import {REJECT_BODY, SHED_BODY} from '../reject-answer.js';

interface HeaderNames {
	readonly status: ':status';
	readonly path: ':path';
	readonly method: ':method';
	readonly protocol: ':protocol';
}

let names: HeaderNames | undefined;

/**
 * Never literals of ours: with a `':status'` literal in this module, V8 made that
 * copy of the name the canonical one before node:http2 used its own constant as a
 * key, and Node's compatibility response then wrote `:status` the slow way on every
 * response (`Http2ServerResponse`'s `kBeginSend`): h2c CPU per request read
 * 1.05-1.08x the bare server's (bench/hot-path.js).
 */
export function headerNames(): HeaderNames {
	if (names === undefined) {
		// Typed as the names they hold (types leave no literal behind).
		const constants = process.getBuiltinModule('node:http2').constants as unknown as {
			HTTP2_HEADER_STATUS: ':status';
			HTTP2_HEADER_PATH: ':path';
			HTTP2_HEADER_METHOD: ':method';
			HTTP2_HEADER_PROTOCOL: ':protocol';
		};
		names = {status: constants.HTTP2_HEADER_STATUS, path: constants.HTTP2_HEADER_PATH, method: constants.HTTP2_HEADER_METHOD, protocol: constants.HTTP2_HEADER_PROTOCOL};
	}

	return names;
}

function answerHeaders(status: number, body: Buffer, contentType = 'text/plain; charset=utf-8'): OutgoingHttpHeaders {
	return {[headerNames().status]: status, 'content-type': contentType, 'content-length': body.length, 'cache-control': 'no-store'};
}

export interface Answer {
	readonly headers: OutgoingHttpHeaders;
	readonly body: Buffer;
}

const answer = (status: number, body: Buffer, contentType?: string): Answer => ({headers: answerHeaders(status, body, contentType), body});

/** gRPC over HTTP/2, not gRPC-Web. */
export const isGrpc = (contentType: string | undefined): boolean => contentType !== undefined && (contentType === 'application/grpc' || contentType.startsWith('application/grpc+') || contentType.startsWith('application/grpc;'));

export class DrainAnswers {
	readonly reject: Answer;
	/** A trailers-only response (the gRPC over HTTP/2 spec): status 14, UNAVAILABLE, which its clients retry elsewhere. */
	readonly grpcReject: OutgoingHttpHeaders;
	readonly eventStream: Answer;
	readonly retireStream = answer(200, eventStreamRetryBody(RETIRE_RETRY_MS), 'text/event-stream');
	/** RFC 8441 extended CONNECT: `503` + `retry-after: 0`, the other workers serve. */
	readonly retireConnect: Answer;
	/** `--max-event-loop-delay`: 503 + `retry-after`, or gRPC's UNAVAILABLE. */
	readonly shed: Answer;
	readonly grpcShed: OutgoingHttpHeaders;

	constructor(retryAfterSeconds: number) {
		const rejected = answer(503, REJECT_BODY);
		this.reject = {headers: {...rejected.headers, 'retry-after': String(retryAfterSeconds)}, body: REJECT_BODY};
		this.grpcReject = {[headerNames().status]: 200, 'content-type': 'application/grpc', 'grpc-status': '14', 'grpc-message': 'graceful-cluster: this server is shutting down; retry on another'};
		const shed = answer(503, SHED_BODY);
		this.shed = {headers: {...shed.headers, 'retry-after': String(retryAfterSeconds)}, body: SHED_BODY};
		this.grpcShed = {[headerNames().status]: 200, 'content-type': 'application/grpc', 'grpc-status': '14', 'grpc-message': 'graceful-cluster: this server is overloaded; retry later'};
		this.eventStream = answer(200, eventStreamRetryBody(retryAfterSeconds * 1000), 'text/event-stream');
		const retire = answer(503, RETIRE_UPGRADE_BODY);
		this.retireConnect = {headers: {...retire.headers, 'retry-after': '0'}, body: RETIRE_UPGRADE_BODY};
	}
}

export const probeAnswer = (status: number, body: Buffer): Answer => answer(status, body);

/** `headers` alone is a trailers-only response. */
export function respond(stream: ServerHttp2Stream, answer: Answer | OutgoingHttpHeaders): void {
	stream.on('error', ignoreError);
	// Reset by the client before its turn: respond() would throw.
	if (stream.destroyed || stream.closed) {
		return;
	}

	if (!('body' in answer)) {
		stream.respond(answer, {endStream: true});
		return;
	}

	// For a HEAD request respond() ends the stream itself (`headRequest`: not in @types/node).
	stream.respond(answer.headers as OutgoingHttpHeaders);
	if (!(stream as {headRequest?: boolean}).headRequest) {
		stream.end(answer.body);
	}
}
