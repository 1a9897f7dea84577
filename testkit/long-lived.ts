/**
 * Clients for long-lived connections, recording what a user would see: a ws
 * WebSocket (its close code, when it closed), a socket.io client on the
 * websocket transport (its disconnect reasons and reconnects), an EventSource
 * (eventsource 4, the WHATWG one for Node: its messages, errors and state).
 * Shared by the e2e tests, the examples test and the rollout harness.
 */
import {performance} from 'node:perf_hooks';
import {EventSource} from 'eventsource';
import {io, type Socket as IoSocket} from 'socket.io-client';
import WebSocket from 'ws';

export interface WsClient {
	readonly ws: WebSocket;
	/** Resolves once open; rejects with the handshake's answer (`status`, `headers`) if it was not a 101. */
	readonly opened: Promise<void>;
	/** Resolves with the close code, its reason and `performance.now()` when it closed. */
	readonly closed: Promise<{code: number; reason: string; at: number}>;
	/** Sends `text` and resolves with the next message. */
	echo(text: string): Promise<string>;
}

export class HandshakeRejected extends Error {
	constructor(readonly status: number, readonly headers: Record<string, string | string[] | undefined>, readonly body: string) {
		super(`WebSocket handshake answered ${status}`);
	}
}

export function openWs(url: string): WsClient {
	const ws = new WebSocket(url);
	const opened = new Promise<void>((resolve, reject) => {
		ws.once('open', resolve);
		ws.once('unexpected-response', (_request, response) => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', (chunk: string) => {
				body += chunk;
			});
			response.on('end', () => {
				reject(new HandshakeRejected(response.statusCode ?? 0, response.headers, body));
				ws.terminate();
			});
		});
		ws.once('error', reject);
	});
	opened.catch(() => {});
	// An error (a reset) also ends in 'close' with 1006: the code tells.
	ws.on('error', () => {});
	const closed = new Promise<{code: number; reason: string; at: number}>(resolve => {
		ws.once('close', (code, reason) => {
			resolve({code, reason: reason.toString(), at: performance.now()});
		});
	});
	return {
		ws,
		opened,
		closed,
		async echo(text) {
			const reply = new Promise<string>(resolve => {
				ws.once('message', data => {
					// eslint-disable-next-line @typescript-eslint/no-base-to-string -- ws hands a text frame over as a Buffer
					resolve(String(data));
				});
			});
			ws.send(text);
			return reply;
		},
	};
}

export interface IoClient {
	readonly socket: IoSocket;
	/** Resolves on the first connect. */
	readonly connected: Promise<void>;
	/** Every disconnect reason, in order, with `performance.now()`. */
	readonly disconnects: Array<{reason: string; at: number}>;
	/** Connects after the first (reconnections). */
	reconnects: number;
}

export function openSocketIo(url: string, options: {reconnectionDelay?: number} = {}): IoClient {
	const socket = io(url, {transports: ['websocket'], reconnectionDelay: options.reconnectionDelay ?? 200, reconnectionDelayMax: 1000, timeout: 5000});
	const client: IoClient = {
		socket,
		connected: new Promise(resolve => {
			socket.once('connect', () => {
				resolve();
			});
		}),
		disconnects: [],
		reconnects: 0,
	};
	let connects = 0;
	socket.on('connect', () => {
		if (connects++ > 0) {
			client.reconnects++;
		}
	});
	socket.on('disconnect', reason => {
		client.disconnects.push({reason, at: performance.now()});
	});
	return client;
}

export interface SseClient {
	readonly source: EventSource;
	readonly messages: string[];
	/** `performance.now()` of each error (each one is a reconnection attempt unless the state is CLOSED). */
	readonly errors: number[];
	/** Opens, the first included. */
	opens: number;
	readonly opened: Promise<void>;
}

export function openEventSource(url: string): SseClient {
	const source = new EventSource(url);
	const client: SseClient = {
		source,
		messages: [],
		errors: [],
		opens: 0,
		opened: new Promise(resolve => {
			source.addEventListener('open', () => {
				resolve();
			}, {once: true});
		}),
	};
	source.addEventListener('open', () => {
		client.opens++;
	});
	source.addEventListener('message', event => {
		client.messages.push(String(event.data));
	});
	source.addEventListener('error', () => {
		client.errors.push(performance.now());
	});
	return client;
}

/** WebSocket close codes that say the connection was cut, not closed: 1006 (no close frame). */
export const ABNORMAL_CLOSE = 1006;
