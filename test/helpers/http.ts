/**
 * Clients for the tests: got with retries and HTTP errors off (a drain 503 must
 * be seen, not retried away), and a raw socket that shows exactly what a
 * keep-alive connection receives.
 */
import {EventEmitter, once} from 'node:events';
import http from 'node:http';
import net from 'node:net';
import {setTimeout as sleep} from 'node:timers/promises';
import got from 'got';

/** Every request on a new connection: Node 20's global agent would reuse sockets. */
export const client = got.extend({
	retry: {limit: 0},
	throwHttpErrors: false,
	timeout: {request: 20_000},
	agent: {http: new http.Agent({keepAlive: false})},
});

export interface RawResponse {
	readonly status: number;
	readonly headers: Record<string, string>;
	readonly body: string;
}

/** A keep-alive connection that sends literal requests and parses the replies. */
export class RawConnection {
	private buffer = '';
	private ended = false;
	private error: Error | undefined;
	/** 'change' on every byte, end or error that comes in. */
	private readonly changes = new EventEmitter();

	private constructor(readonly socket: net.Socket) {
		socket.setEncoding('latin1');
		socket.on('data', (chunk: string) => {
			this.buffer += chunk;
			this.wake();
		});
		socket.on('end', () => {
			this.ended = true;
			this.wake();
		});
		socket.on('error', error => {
			this.error = error;
			this.wake();
		});
		socket.on('close', () => {
			this.ended = true;
			this.wake();
		});
	}

	static async open(port: number): Promise<RawConnection> {
		const socket = net.connect(port, '127.0.0.1');
		await once(socket, 'connect');
		return new RawConnection(socket);
	}

	/** Sends one request and resolves with its response; rejects on reset or EOF before a full response. */
	async request(path: string, {method = 'GET', body = ''}: {method?: string; body?: string} = {}): Promise<RawResponse> {
		this.socket.write(`${method} ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
		return this.readResponse();
	}

	/** Resolves true once the server has closed the connection (FIN), false on a reset. */
	async closedByServer(): Promise<'fin' | 'reset'> {
		while (!this.ended && !this.error) {
			await once(this.changes, 'change');
		}

		return this.error ? 'reset' : 'fin';
	}

	close(): void {
		this.socket.destroy();
	}

	/** The next response on this connection (for requests written by hand, pipelined ones too). */
	async readResponse(): Promise<RawResponse> {
		for (;;) {
			const parsed = this.tryParse();
			if (parsed) {
				return parsed;
			}

			if (this.error) {
				throw this.error;
			}

			if (this.ended) {
				throw new Error(`connection closed before a full response; got ${JSON.stringify(this.buffer)}`);
			}

			await once(this.changes, 'change');
		}
	}

	private tryParse(): RawResponse | undefined {
		const end = this.buffer.indexOf('\r\n\r\n');
		if (end === -1) {
			return undefined;
		}

		const [statusLine, ...headerLines] = this.buffer.slice(0, end).split('\r\n');
		const headers: Record<string, string> = {};
		for (const line of headerLines) {
			const colon = line.indexOf(':');
			headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
		}

		const length = Number(headers['content-length'] ?? 0);
		if (this.buffer.length < end + 4 + length) {
			return undefined;
		}

		const body = this.buffer.slice(end + 4, end + 4 + length);
		this.buffer = this.buffer.slice(end + 4 + length);
		return {status: Number(statusLine!.split(' ')[1]), headers, body};
	}

	private wake(): void {
		this.changes.emit('change');
	}
}

/**
 * Writes `text` on a new connection and collects everything received until the
 * server closes it, or `ms` pass (`closed` says which). `after` runs once the
 * text is written (to answer a `100 Continue`, say).
 */
export async function rawExchange(port: number, text: string, {ms = 3000, after, until}: {ms?: number; after?: (socket: net.Socket, received: () => string) => void; until?: (received: string) => boolean} = {}): Promise<{received: string; closed: boolean}> {
	const socket = net.connect(port, '127.0.0.1');
	let received = '';
	let done: (() => void) | undefined;
	socket.setEncoding('latin1');
	socket.on('data', (chunk: string) => {
		received += chunk;
		// `until`: what the test waits for has arrived; no need to wait out `ms`.
		if (until?.(received)) {
			done?.();
		}
	});
	socket.on('error', () => {});
	await once(socket, 'connect');
	socket.write(text);
	after?.(socket, () => received);
	const closed = await Promise.race([
		once(socket, 'close').then(() => true),
		sleep(ms).then(() => false),
		new Promise<boolean>(resolve => {
			done = () => {
				resolve(false);
			};
		}),
	]);
	socket.destroy();
	return {received, closed};
}

/** A WebSocket handshake request, written by hand. */
export const UPGRADE_REQUEST = 'GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n';
