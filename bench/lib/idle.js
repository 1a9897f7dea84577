// Many idle keep-alive connections, opened with raw sockets (a client library
// would hide resets and reconnect on its own). Each connection sends one request
// and reads its 200 before the signal; some then send one more request during
// the reject phase ("senders"). Every socket records how and when it ended.
import net from 'node:net';
import {performance} from 'node:perf_hooks';
import {eventually} from '../../dist/testkit/proc.js';

const REQUEST = 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';

function statuses(text) {
	return [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map(match => Number(match[1]));
}

function openOne(port) {
	return new Promise(resolve => {
		const conn = {socket: undefined, text: '', error: undefined, closedAt: undefined, sender: false, sentAt: undefined, ready: false};
		const socket = net.connect({port, host: '127.0.0.1'});
		conn.socket = socket;
		socket.setEncoding('latin1');
		socket.on('connect', () => socket.write(REQUEST));
		socket.on('data', chunk => {
			conn.text += chunk;
			if (!conn.ready && conn.text.endsWith('hello world')) {
				conn.ready = true;
				resolve(conn);
			}
		});
		socket.on('error', error => {
			conn.error = error.code ?? error.message;
		});
		socket.on('close', () => {
			conn.closedAt = performance.now();
			if (!conn.ready) {
				resolve(conn);
			}
		});
	});
}

/** Opens `count` connections, `batch` at a time, within `timeoutMs`. */
export async function openIdle(port, count, {batch = 200, timeoutMs = 120_000} = {}) {
	const deadline = performance.now() + timeoutMs;
	const conns = [];
	for (let i = 0; i < count && performance.now() < deadline; i += batch) {
		conns.push(...await Promise.all(Array.from({length: Math.min(batch, count - i)}, () => openOne(port))));
	}

	return conns;
}

/** Makes `conns` send one more request each, at the given times (performance.now()). */
export function scheduleSenders(conns, times) {
	const timers = [];
	conns.forEach((conn, i) => {
		conn.sender = true;
		timers.push(setTimeout(() => {
			conn.sentAt = performance.now();
			conn.text = '';
			if (conn.closedAt === undefined) {
				conn.socket.write(REQUEST);
			}
		}, Math.max(0, times[i] - performance.now())));
	});
	return timers;
}

/** Waits until every socket has closed, at most until `until` (performance.now()). */
export async function waitAllClosed(conns, until) {
	await eventually(() => conns.every(conn => conn.closedAt !== undefined), {timeout: Math.max(0, until - performance.now()), interval: 10});
}

export function closeAll(conns) {
	for (const conn of conns) {
		conn.socket.destroy();
	}
}

export {statuses};
