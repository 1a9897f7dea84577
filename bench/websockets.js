// 10,000 idle WebSockets at SIGTERM: graceful-cluster (-w 2) drains a ws app that
// leaves its sockets open; every client must be closed with a close frame (1001)
// by the end of the reject phase, none cut (1006), and the primary exit 0. Prints
// the time from the reject phase's end to the last close, and the exit.
//
//   npm run build && node bench/websockets.js [--count 10000] [--reject 2000]
//
// Needs about count + 1000 file descriptors in this process (`ulimit -n`); the
// workers hold the other ends. Not part of the test suite.
import {execFileSync} from 'node:child_process';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {setTimeout as sleep} from 'node:timers/promises';
import {parseArgs} from 'node:util';
import WebSocket from 'ws';
import {freePort} from '../dist/testkit/net.js';
import {parseJsonLine, spawnGroup} from '../dist/testkit/proc.js';
import {summary} from './lib/stats.js';

const {values} = parseArgs({options: {count: {type: 'string', default: '10000'}, reject: {type: 'string', default: '2000'}}});
const count = Number(values.count);
const rejectMs = Number(values.reject);
const ROOT = new URL('../', import.meta.url).pathname;

const limit = Number(execFileSync('sh', ['-c', 'ulimit -n'], {encoding: 'utf8'}).trim());
if (limit < count + 1000) {
	console.error(`ulimit -n is ${limit}; ${count} WebSockets need about ${count + 1000}: run \`ulimit -n ${count + 1000}\` first.`);
	process.exit(2);
}

const port = await freePort();
const dist = process.env.BENCH_DIST ?? `${ROOT}dist`;
const cli = spawnGroup(process.execPath, [`${dist}/src/cli.js`, '-w', '2', '--reject-period', `${rejectMs}ms`, '--grace-period', '60s', `${ROOT}bench/servers/websocket.mjs`], {
	name: 'graceful-cluster',
	env: {...process.env, PORT: String(port)},
	parse: line => parseJsonLine(line),
});
const msg = async (text, options = {}) => cli.waitFor(line => line.msg === text, {count: options.count ?? 1, timeout: options.timeout ?? 30_000, what: text});

try {
	await msg('listening', {count: 2});
	// Open them in batches, so the accept queue never overflows.
	const clients = [];
	const openedAt = performance.now();
	for (let i = 0; i < count; i += 500) {
		const batch = Array.from({length: Math.min(500, count - i)}, () => {
			const ws = new WebSocket(`ws://127.0.0.1:${port}/`, {perMessageDeflate: false});
			const client = {ws, code: undefined, closedAt: undefined, frameAt: undefined};
			ws.on('error', () => {});
			ws.once('open', () => {
				// ws has no event for the close frame's arrival; on an idle socket the
				// first bytes after the handshake are that frame.
				ws._socket.once('data', () => {
					client.frameAt = performance.now();
				});
			});
			ws.on('close', code => {
				client.code = code;
				client.closedAt = performance.now();
			});
			clients.push(client);
			return new Promise(resolve => {
				ws.once('open', resolve);
				ws.once('close', resolve);
			});
		});
		await Promise.all(batch);
	}

	const open = clients.filter(client => client.ws.readyState === WebSocket.OPEN).length;
	console.log(`opened ${open}/${count} WebSockets in ${((performance.now() - openedAt) / 1000).toFixed(1)} s`);
	await sleep(1000);

	const signalEpoch = Date.now();
	const signalAt = cli.signal('SIGTERM');
	const rejectEnd = signalAt + rejectMs;
	await cli.exitWithin(rejectMs + 30_000);
	const exitAt = cli.exit?.at;
	// This process handles all 10,000 client ends: give it time to read them.
	for (let waited = 0; waited < 20_000 && clients.some(client => client.closedAt === undefined); waited += 100) {
		await sleep(100);
	}

	const codes = {};
	for (const client of clients) {
		codes[client.code ?? 'open'] = (codes[client.code ?? 'open'] ?? 0) + 1;
	}

	const afterEnd = clients.filter(client => client.closedAt !== undefined).map(client => client.closedAt - rejectEnd);
	const frames = clients.filter(client => client.frameAt !== undefined).map(client => client.frameAt - rejectEnd);
	const s = summary(afterEnd);
	const f = summary(frames);
	const closedLine = cli.lines.filter(line => line.msg?.startsWith('closed the long-lived connections'));
	const drained = cli.lines.filter(line => line.msg === 'worker drained');
	const rel = line => `${(line.time - signalEpoch - rejectMs).toFixed(0)} ms`;
	console.log(`close codes seen by the clients: ${JSON.stringify(codes)}`);
	console.log(`workers closed them (log line) at ${closedLine.map(line => `${rel(line)} (${line.upgrades})`).join(', ')} after the reject phase's end (${rejectMs} ms after SIGTERM); workers drained at ${drained.map(line => rel(line)).join(', ')}`);
	console.log(`close frame received by the client: first ${f.min.toFixed(0)} ms, median ${f.median.toFixed(0)} ms, last ${f.max.toFixed(0)} ms after the reject phase's end (${f.n} clients)`);
	console.log(`'close' event (TCP closed) at the client: first ${s.min.toFixed(0)} ms, median ${s.median.toFixed(0)} ms, last ${s.max.toFixed(0)} ms after it`);
	console.log(`primary exit code ${cli.exit?.code}, ${(exitAt - signalAt).toFixed(0)} ms after SIGTERM (${(exitAt - rejectEnd).toFixed(0)} ms after the reject phase's end)`);
	const ok = codes['1001'] === count && cli.exit?.code === 0;
	console.log(ok ? 'OK: every WebSocket closed with 1001, exit 0' : 'FAILED');
	for (const client of clients) {
		client.ws.terminate();
	}

	process.exitCode = ok ? 0 : 1;
} finally {
	cli.stop();
}
