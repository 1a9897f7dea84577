// The hot-path benchmark's clients (bench/hot-path.js): each sends a fixed number
// of requests (or WebSocket messages) to 127.0.0.1:port, `concurrency` at a time,
// and records every one's latency. Fixed counts, not fixed durations: the figure
// is the server's CPU time per request, so every run must do the same work.
//
// HTTP/1.1 goes over raw sockets, as the bytes a load balancer sends: no client
// library's pooling or header handling between the count and the wire. HTTP/2
// uses node:http2 and WebSockets the `ws` client, the clients apps meet.
import http2 from 'node:http2';
import net from 'node:net';
import {performance} from 'node:perf_hooks';
import WebSocket from 'ws';

const HEADER_END = Buffer.from('\r\n\r\n');

/** A run's outcome: `ok` answers with status 2xx, `statuses` by code, `errors`, and the latencies (ms, sorted). */
function tally() {
	const latencies = [];
	const statuses = {};
	let errors = 0;
	const startedAt = performance.now();
	return {
		done(status, sentAt) {
			statuses[status] = (statuses[status] ?? 0) + 1;
			latencies.push(performance.now() - sentAt);
		},
		error() {
			errors++;
		},
		result() {
			const seconds = (performance.now() - startedAt) / 1000;
			const ok = Object.entries(statuses).filter(([code]) => code >= 200 && code < 300).reduce((sum, [, n]) => sum + n, 0);
			return {ok, statuses, errors, seconds, latencies: Float64Array.from(latencies).sort()};
		},
	};
}

/**
 * One response from the front of `buffer`: {status, length} once the head and a
 * Content-Length body are in it, undefined before. The bench servers always send
 * a Content-Length (no chunked bodies to parse here).
 */
function parseResponse(buffer) {
	const end = buffer.indexOf(HEADER_END);
	if (end === -1) {
		return undefined;
	}

	const head = buffer.toString('latin1', 0, end);
	const status = Number(head.slice(9, 12));
	const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
	const length = end + HEADER_END.length + Number(match?.[1] ?? 0);
	return buffer.length >= length ? {status, length} : undefined;
}

/**
 * HTTP/1.1 GETs of `path`. keepAlive: `concurrency` connections, one request at
 * a time on each (no pipelining), as a proxy's upstream pool does. Otherwise a
 * new connection per request, `Connection: close`, as many clients behind an L4
 * balancer do.
 */
export function http1({port, path = '/', total, concurrency = 20, keepAlive = true}) {
	const request = Buffer.from(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${keepAlive ? '' : 'Connection: close\r\n'}\r\n`);
	const counts = tally();
	let issued = 0;
	return new Promise(resolve => {
		let lanes = Math.min(concurrency, total);
		const laneDone = () => {
			if (--lanes === 0) {
				resolve(counts.result());
			}
		};

		const keptAlive = () => {
			const socket = net.connect(port, '127.0.0.1');
			socket.setNoDelay(true);
			let buffer = Buffer.alloc(0);
			let sentAt;
			const send = () => {
				if (issued >= total) {
					socket.end();
					return false;
				}

				issued++;
				sentAt = performance.now();
				socket.write(request);
				return true;
			};

			socket.once('connect', send);
			socket.on('data', chunk => {
				buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
				const response = parseResponse(buffer);
				if (response) {
					buffer = buffer.subarray(response.length);
					counts.done(response.status, sentAt);
					send();
				}
			});
			socket.on('error', () => counts.error());
			socket.once('close', laneDone);
		};

		const oneShot = () => {
			if (issued >= total) {
				laneDone();
				return;
			}

			issued++;
			const sentAt = performance.now();
			const socket = net.connect(port, '127.0.0.1', () => socket.end(request));
			const chunks = [];
			let failed = false;
			socket.on('data', chunk => chunks.push(chunk));
			socket.on('error', () => {
				failed = true;
			});
			socket.once('close', () => {
				const response = parseResponse(Buffer.concat(chunks));
				if (failed || !response) {
					counts.error();
				} else {
					counts.done(response.status, sentAt);
				}

				oneShot();
			});
		};

		for (let i = lanes; i > 0; i--) {
			(keepAlive ? keptAlive : oneShot)();
		}
	});
}

/** HTTP/2 (h2c) GETs of `path`: `sessions` connections with `streams` requests in flight on each. */
export async function h2({port, path = '/', total, sessions = 2, streams = 10}) {
	const counts = tally();
	let issued = 0;
	const run = session => new Promise(resolve => {
		let open = 0;
		const next = () => {
			if (issued >= total) {
				if (open === 0) {
					session.close(resolve);
				}

				return;
			}

			issued++;
			open++;
			const sentAt = performance.now();
			const stream = session.request({':path': path});
			let status = 0;
			stream.once('response', headers => {
				status = headers[':status'];
			});
			stream.resume();
			stream.once('error', () => counts.error());
			stream.once('close', () => {
				open--;
				if (status) {
					counts.done(status, sentAt);
				}

				next();
			});
		};

		for (let i = 0; i < streams; i++) {
			next();
		}
	});

	const clients = Array.from({length: sessions}, () => http2.connect(`http://127.0.0.1:${port}`).on('error', () => counts.error()));
	await Promise.all(clients.map(session => run(session)));
	return counts.result();
}

/** WebSocket echoes: `sockets` connections, one 16-byte text message at a time on each; the echo completes it. */
export async function wsEcho({port, path = '/', total, sockets = 20}) {
	const message = 'x'.repeat(16);
	const counts = tally();
	let issued = 0;
	const run = () => new Promise(resolve => {
		const socket = new WebSocket(`ws://127.0.0.1:${port}${path}`, {perMessageDeflate: false});
		let sentAt;
		const send = () => {
			if (issued >= total) {
				socket.close();
				return;
			}

			issued++;
			sentAt = performance.now();
			socket.send(message);
		};

		socket.once('open', send);
		socket.on('message', () => {
			// A WebSocket message has no status: an echo counts as a 200.
			counts.done(200, sentAt);
			send();
		});
		socket.on('error', () => counts.error());
		socket.once('close', resolve);
	});

	await Promise.all(Array.from({length: sockets}, run));
	return counts.result();
}
