/**
 * HTTP/2 for the tests: node:http2's client with every GOAWAY it receives
 * recorded, and a self-signed certificate made by openssl for the TLS servers
 * (Node 20 cannot make X.509 certificates itself).
 */
import {execFileSync} from 'node:child_process';
import {once} from 'node:events';
import {mkdtempSync, readFileSync, rmSync} from 'node:fs';
import http2, {type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders} from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import type {ExecutionContext} from 'ava';

export interface TestCertificate {
	readonly keyPath: string;
	readonly certPath: string;
	readonly key: Buffer;
	readonly cert: Buffer;
}

/** A key and a self-signed certificate for localhost and 127.0.0.1, in a temporary directory removed in teardown. */
export function makeCertificate(t: ExecutionContext): TestCertificate {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'graceful-cluster-tls-'));
	t.teardown(() => {
		rmSync(dir, {recursive: true, force: true});
	});
	const keyPath = path.join(dir, 'key.pem');
	const certPath = path.join(dir, 'cert.pem');
	execFileSync('openssl', [
		'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
		'-keyout', keyPath, '-out', certPath, '-days', '1', '-subj', '/CN=localhost',
		'-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
	], {stdio: 'ignore'});
	return {keyPath, certPath, key: readFileSync(keyPath), cert: readFileSync(certPath)};
}

export interface Goaway {
	readonly code: number;
	readonly lastStreamID: number;
	/** `Date.now()` when it arrived. */
	readonly at: number;
}

export interface H2Response {
	readonly status: number;
	readonly headers: IncomingHttpHeaders;
	readonly body: string;
}

/** A stream opened by `H2Client.open()`, its body collected as it arrives. */
export interface H2Stream {
	readonly stream: ClientHttp2Stream;
	/** Resolves with the response's status and headers; rejects on a stream error. */
	readonly response: Promise<{status: number; headers: IncomingHttpHeaders}>;
	/** The body received so far. */
	text(): string;
	/** Resolves with the whole body once the stream ended; rejects on a stream error. */
	readonly ended: Promise<string>;
}

/** A client session, with the GOAWAYs it got and when it closed. */
export interface H2Client {
	readonly session: ClientHttp2Session;
	readonly goaways: Goaway[];
	/** Resolves with `Date.now()` when the session has closed. */
	readonly closed: Promise<number>;
	/** Opens a stream; `endStream: false` leaves the request body to the caller. */
	open(path: string, options?: {method?: string; headers?: OutgoingHttpHeaders; endStream?: boolean}): H2Stream;
	/** One GET (or `method`) on this session, with `headers` added. */
	request(path: string, options?: {method?: string; body?: string; headers?: OutgoingHttpHeaders}): Promise<H2Response>;
	/** Resolves with the `count`-th GOAWAY (1 = the first). */
	goaway(count?: number): Promise<Goaway>;
	close(): void;
}

/** Connects to `http://127.0.0.1:port` (h2c) or, with `ca`, `https://localhost:port`. */
export function connect(t: ExecutionContext, port: number, ca?: Buffer): H2Client {
	const authority = ca ? `https://localhost:${port}` : `http://127.0.0.1:${port}`;
	const session = http2.connect(authority, ca ? {ca} : {});
	const goaways: Goaway[] = [];
	session.on('goaway', (code: number, lastStreamID: number) => {
		goaways.push({code, lastStreamID, at: Date.now()});
		session.emit('test:goaway');
	});
	// A session error (the server going away under a stream) fails that stream's request.
	session.on('error', () => undefined);
	const closed = once(session, 'close').then(() => Date.now());
	t.teardown(() => {
		session.destroy();
	});
	return {
		session,
		goaways,
		closed,
		open(requestPath, {method = 'GET', headers: extra = {}, endStream = true} = {}) {
			const stream = session.request({...extra, ':path': requestPath, ':method': method}, {endStream});
			stream.setEncoding('utf8');
			let text = '';
			stream.on('data', (chunk: string) => {
				text += chunk;
			});
			// Both listened for at once: a short response's 'end' can follow 'response' in the same tick.
			const response = once(stream, 'response').then(([headers]) => ({status: Number((headers as IncomingHttpHeaders)[':status']), headers: headers as IncomingHttpHeaders}));
			const ended = once(stream, 'end').then(() => text);
			// An error rejects both, reported to whoever awaits them.
			response.catch(() => undefined);
			ended.catch(() => undefined);
			return {stream, response, ended, text: () => text};
		},
		async request(requestPath, {method = 'GET', body, headers: extra = {}} = {}) {
			const opened = this.open(requestPath, {method, headers: extra, endStream: body === undefined});
			if (body !== undefined) {
				opened.stream.end(body);
			}

			const {status, headers} = await opened.response;
			return {status, headers, body: await opened.ended};
		},
		async goaway(count = 1) {
			while (goaways.length < count) {
				await once(session, 'test:goaway');
			}

			return goaways[count - 1]!;
		},
		close() {
			session.close();
		},
	};
}

/** The largest stream id: the first GOAWAY of a graceful shutdown carries it (RFC 9113 section 6.8). */
export const MAX_STREAM_ID = 2 ** 31 - 1;
