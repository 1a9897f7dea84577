// What the primary's watch over node:cluster's round-robin hand-off
// (src/primary/handoffs.ts) costs per connection, without I/O: node:cluster
// sends the worker its 'newconn' and hears the worker's answer; here a fake
// worker process takes both, 2M times, bare (node:cluster's own listener
// alone) and watched, alternating in one process. For scale: the primary
// itself spends about 135 us per connection (accept, the hand-off over IPC with
// its file descriptor, the answer), a hand-written node:cluster primary as much.
//
//   node bench/handoff-micro.js [rounds]
import {EventEmitter} from 'node:events';
import process from 'node:process';
import {fmt, summary} from './lib/stats.js';

const {HandoffWatch} = await import('../dist/src/primary/handoffs.js');
const N = 2_000_000;

function run(watched) {
	const child = new EventEmitter();
	Object.assign(child, {connected: true, exitCode: null, signalCode: null, send: () => true});
	// node:cluster's own listener, added by cluster.fork().
	child.on('internalMessage', () => {});
	if (watched) {
		new HandoffWatch(() => {}).watch({id: 1, process: child});
	}

	const handle = {};
	const startedAt = process.hrtime.bigint();
	for (let seq = 0; seq < N; seq++) {
		child.send({cmd: 'NODE_CLUSTER', act: 'newconn', key: '127.0.0.1:3000:4:-1:0', seq}, handle);
		child.emit('internalMessage', {cmd: 'NODE_CLUSTER', ack: seq, accepted: true, seq: seq + 1}, undefined);
	}

	return Number(process.hrtime.bigint() - startedAt) / N;
}

const rounds = Number(process.argv[2] ?? 7);
const bare = [];
const watched = [];
for (let round = 0; round < rounds; round++) {
	// Alternating which goes first.
	if (round % 2 === 0) {
		bare.push(run(false));
		watched.push(run(true));
	} else {
		watched.push(run(true));
		bare.push(run(false));
	}
}

const extra = summary(watched.map((each, index) => each - bare[index]));
console.log(`node:cluster hand-off, per connection: bare ${fmt(summary(bare), {decimals: 0, unit: ' ns'})}, watched ${fmt(summary(watched), {decimals: 0, unit: ' ns'})}; the watch adds ${fmt(extra, {decimals: 0, unit: ' ns'})} (${rounds} rounds of ${N / 1e6}M)`);
