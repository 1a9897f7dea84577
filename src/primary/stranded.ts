/**
 * The primary's answer to a connection node:cluster stranded (handoffs.ts):
 * accepted, never read, and no worker left to take it. It answers as a worker
 * in its reject phase would have:
 * - an HTTP/1.x request gets the drain's 503, which clients and load balancers retry;
 * - HTTP/2 without TLS gets a GOAWAY with last stream 0, so the client retries
 *   each stream on a new connection;
 * - anything else (TLS, another protocol, nothing within FIRST_BYTES_WAIT_MS)
 *   is closed: the primary cannot speak for the app there, and a connection
 *   closed with its request unread is as safe to retry as a refused one.
 */
import net from 'node:net';
import {NO_WORKER_BODY, rawServiceUnavailable, REJECT_BODY} from '../reject-answer.js';
import type {Logger} from '../logger.js';
import type {RawHandle} from './handoffs.js';

export type StrandedAnswer = '503' | 'goaway' | 'closed';

/** How long the client's request may take to show, from when the primary takes the connection over. */
export const FIRST_BYTES_WAIT_MS = 1000;
/** After the answer, how long the client has to read it and close before the connection is destroyed. */
const CLOSE_WAIT_MS = 2000;

/** An HTTP/1.x request line (`PRI * HTTP/2.0`, HTTP/2's preface, is not one). */
const HTTP1_REQUEST_LINE = /^[A-Z][A-Z_-]{0,31} \S+ HTTP\/1\.[01]\r?\n/;
const HTTP2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

/**
 * The server's side of an HTTP/2 connection that ends at once (RFC 9113 §3.4,
 * §6.8): an empty SETTINGS frame, then GOAWAY, last stream 0, NO_ERROR. A
 * frame header is length: 3, type: 1, flags: 1, stream: 4 bytes.
 */
const HTTP2_GOAWAY = Buffer.from([
	0, 0, 0, 0x4, 0, 0, 0, 0, 0,
	0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
]);

/** How much of a request line is waited for; a longer one is no request the primary answers. */
const FIRST_LINE_MAX = 8192;

function answerTo(first: Buffer | undefined, retryAfterSeconds: number, body: Buffer): [StrandedAnswer, Buffer | string] {
	const start = first?.toString('latin1', 0, Math.min(first.length, FIRST_LINE_MAX)) ?? '';
	if (HTTP1_REQUEST_LINE.test(start)) {
		return ['503', rawServiceUnavailable(retryAfterSeconds, body)];
	}

	// Its first 24 bytes, whole or in part (a client may send it in pieces).
	return start.length >= 14 && HTTP2_PREFACE.startsWith(start.slice(0, HTTP2_PREFACE.length)) ? ['goaway', HTTP2_GOAWAY] : ['closed', ''];
}

/** Resolves once the answer is with the OS (the primary may exit then); never rejects. */
export async function answerStranded(handle: RawHandle, retryAfterSeconds: number, {draining}: {readonly draining: boolean}): Promise<StrandedAnswer> {
	try {
		return await answer(handle, retryAfterSeconds, draining ? REJECT_BODY : NO_WORKER_BODY);
	} catch {
		// A handle closed under us (by node:cluster, say): nothing to answer; the primary must not fail for it.
		(handle as {close?: () => void}).close?.();
		return 'closed';
	}
}

async function answer(handle: RawHandle, retryAfterSeconds: number, body: Buffer): Promise<StrandedAnswer> {
	// `handle` is undocumented in net.Socket's options, but is how Node itself
	// wraps a handle received over IPC (child_process).
	const socket = new net.Socket({handle} as net.SocketConstructorOpts);
	// The client may have given up already: its reset is no error of ours.
	socket.on('error', () => {});
	const closed = new Promise<void>(resolve => {
		socket.once('close', () => {
			resolve();
		});
	});
	// Its first line (a request line may come in pieces), and then every byte
	// read and dropped: closing with unread bytes would reset the connection
	// before the client reads the answer.
	const first = await new Promise<Buffer | undefined>(resolve => {
		let received = Buffer.alloc(0);
		const timer = setTimeout(() => {
			resolve(received.length > 0 ? received : undefined);
		}, FIRST_BYTES_WAIT_MS).unref();
		socket.on('data', (chunk: Buffer) => {
			if (received.length >= FIRST_LINE_MAX) {
				return;
			}

			received = Buffer.concat([received, chunk]);
			if (received.includes(10) || received.length >= FIRST_LINE_MAX) {
				clearTimeout(timer);
				resolve(received);
			}
		});
		void closed.then(() => {
			clearTimeout(timer);
			resolve(undefined);
		});
	});
	const [kind, bytes] = answerTo(first, retryAfterSeconds, body);
	// The client reads the answer and closes; one that does not is cut after CLOSE_WAIT_MS.
	setTimeout(() => socket.destroy(), CLOSE_WAIT_MS).unref();
	await new Promise<void>(resolve => {
		socket.end(bytes, () => {
			resolve();
		});
		void closed.then(resolve);
	});
	return kind;
}

/** A drain counts the stranded connections; at any other time (a worker that died with one on its way) each is logged. */
export class StrandedConnections {
	private readonly answering = new Set<Promise<void>>();

	constructor(private readonly retryAfterSeconds: number, private readonly logger: Logger) {}

	/** `drain`: the drain that counts it, if one runs. */
	answer(handle: RawHandle, drain: {onStranded(): void} | undefined): void {
		drain?.onStranded();
		const answered = answerStranded(handle, this.retryAfterSeconds, {draining: drain !== undefined}).then(answer => {
			this.answering.delete(answered);
			if (drain === undefined) {
				this.logger.warn({answer}, 'node:cluster accepted a connection and had no worker left to take it (none listening on its port any more, or the one it was sent to exited); the primary answered it');
			}
		});
		this.answering.add(answered);
	}

	get answered(): Promise<unknown> {
		return Promise.all(this.answering);
	}
}
