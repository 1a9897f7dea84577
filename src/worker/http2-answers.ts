/**
 * The HTTP/2 answers the drain writes itself, the app never called
 * (http2-filter.ts): the drain 503 (a gRPC call's UNAVAILABLE), its event-stream
 * form, a retiring worker's, a probe's. No `connection` header: connection-specific
 * headers are malformed in HTTP/2; connections end with GOAWAY (http2-sessions.ts).
 */
import process from 'node:process';
import type {OutgoingHttpHeaders, ServerHttp2Stream} from 'node:http2';
import {RETIRE_UPGRADE_BODY} from './http1-answers.js';
import {eventStreamRetryBody, ignoreError, RETIRE_RETRY_MS} from './long-lived.js';
import {REJECT_BODY} from '../reject-answer.js';

/** The pseudo-headers read or written here, as node:http2's own strings (`headerNames`). */
interface HeaderNames {
	readonly status: ':status';
	readonly path: ':path';
	readonly method: ':method';
	readonly protocol: ':protocol';
}

let names: HeaderNames | undefined;

/**
 * The pseudo-header names as node:http2's own string constants, never as
 * literals of ours. With a `':status'` literal in this module, V8 made that
 * copy of the name the canonical one before node:http2 first used its own
 * constant as a key, and from then on Node's compatibility response wrote
 * `:status` the slow way on every response (`Http2ServerResponse`'s
 * `kBeginSend`: about 10x its CPU in a profile, whether attach() was called or
 * the module only imported); h2c CPU per request read 1.05-1.08x the bare
 * server's (bench/hot-path.js). node:http2 is loaded by the time this runs:
 * the app made an HTTP/2 server.
 */
export function headerNames(): HeaderNames {
	if (names === undefined) {
		// Typed as the names they hold, which IncomingHttpHeaders types by name (types leave no literal behind).
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

/** The headers of an answer made here. */
function answerHeaders(status: number, body: Buffer, contentType = 'text/plain; charset=utf-8'): OutgoingHttpHeaders {
	return {[headerNames().status]: status, 'content-type': contentType, 'content-length': body.length, 'cache-control': 'no-store'};
}

/** A whole answer: its headers (with `:status`), its body. */
export interface Answer {
	readonly headers: OutgoingHttpHeaders;
	readonly body: Buffer;
}

const answer = (status: number, body: Buffer, contentType?: string): Answer => ({headers: answerHeaders(status, body, contentType), body});

/** gRPC over HTTP/2 (`application/grpc`, `application/grpc+proto`, ...), not gRPC-Web. */
export const isGrpc = (contentType: string | undefined): boolean => contentType !== undefined && (contentType === 'application/grpc' || contentType.startsWith('application/grpc+') || contentType.startsWith('application/grpc;'));

/** The drain's answers for one `--retry-after`, made once per filter. */
export class DrainAnswers {
	readonly reject: Answer;
	/** A gRPC call's refusal, a trailers-only response (the gRPC over HTTP/2 spec): status 14, UNAVAILABLE, which its clients retry elsewhere. */
	readonly grpcReject: OutgoingHttpHeaders;
	/** For a new event stream: a 200 that ends at once after `retry:` (EventSource never retries a 503). */
	readonly eventStream: Answer;
	/** A retiring worker's, for a new event stream: reconnect soon (long-lived.ts RETIRE_RETRY_MS). */
	readonly retireStream = answer(200, eventStreamRetryBody(RETIRE_RETRY_MS), 'text/event-stream');
	/** A retiring worker's, for a WebSocket (RFC 8441 extended CONNECT): `503` + `retry-after: 0`, the other workers serve. */
	readonly retireConnect: Answer;

	constructor(retryAfterSeconds: number) {
		const rejected = answer(503, REJECT_BODY);
		this.reject = {headers: {...rejected.headers, 'retry-after': String(retryAfterSeconds)}, body: REJECT_BODY};
		this.grpcReject = {[headerNames().status]: 200, 'content-type': 'application/grpc', 'grpc-status': '14', 'grpc-message': 'graceful-cluster: this server is shutting down; retry on another'};
		this.eventStream = answer(200, eventStreamRetryBody(retryAfterSeconds * 1000), 'text/event-stream');
		const retire = answer(503, RETIRE_UPGRADE_BODY);
		this.retireConnect = {headers: {...retire.headers, 'retry-after': '0'}, body: RETIRE_UPGRADE_BODY};
	}
}

/** A probe's answer (probes.ts). */
export const probeAnswer = (status: number, body: Buffer): Answer => answer(status, body);

/** Writes `headers` alone (a trailers-only response), or `answer` whole. */
export function respond(stream: ServerHttp2Stream, answer: Answer | OutgoingHttpHeaders): void {
	// A client's RST_STREAM on a stream answered here: nothing to do.
	stream.on('error', ignoreError);
	// Reset by the client before its turn: respond() would throw.
	if (stream.destroyed || stream.closed) {
		return;
	}

	if (!('body' in answer)) {
		stream.respond(answer, {endStream: true});
		return;
	}

	// respond() copies the headers; for a HEAD request it ends the stream itself
	// (`headRequest`: in Node since v8, not in @types/node).
	stream.respond(answer.headers as OutgoingHttpHeaders);
	if (!(stream as {headRequest?: boolean}).headRequest) {
		stream.end(answer.body);
	}
}
