// The primary's watch over node:cluster's round-robin hand-off (primary/handoffs.ts),
// on fake workers that speak node:cluster's messages: which connections it calls
// stranded, and which it leaves to node:cluster. The real thing, end to end, is
// e2e/stranded.test.ts.
import {EventEmitter} from 'node:events';
import type {Worker} from 'node:cluster';
import test from 'ava';
import {HandoffWatch, type RawHandle} from '../../src/primary/handoffs.js';

const KEY = '127.0.0.1:3000:4:-1:0';

/** A worker's process as node:cluster's primary sees it: `send`, 'internalMessage', 'exit', 'disconnect'. */
class FakeChild extends EventEmitter {
	connected = true;
	exitCode: number | null = null;
	signalCode: NodeJS.Signals | null = null;
	readonly sent: unknown[] = [];

	send(message: unknown, _handle?: unknown): boolean {
		this.sent.push(message);
		return true;
	}

	/** A message from the worker, as node:cluster hears it (its own listener first, as in a real primary). */
	answer(message: Record<string, unknown>): void {
		this.emit('internalMessage', {cmd: 'NODE_CLUSTER', ...message});
	}

	exit(): void {
		this.exitCode = 1;
		this.emit('exit', 1, null);
	}

	closeChannel(): void {
		this.connected = false;
		this.emit('disconnect');
	}
}

let seq = 100;

/** A refusal is looked at once node:cluster has acted on it: a microtask later. */
const acted = async () => new Promise<void>(resolve => {
	queueMicrotask(resolve);
});

function setup() {
	const stranded: RawHandle[] = [];
	const watch = new HandoffWatch(handle => {
		stranded.push(handle);
	});
	const fork = (id: number) => {
		const child = new FakeChild();
		// node:cluster's own listener, added in cluster.fork(): the watch puts its own ahead of it.
		child.on('internalMessage', () => {});
		watch.watch({id, process: child} as unknown as Worker);
		return child;
	};

	/** node:cluster's answer to the worker's listen(): it takes the port's connections from now on. */
	const listen = (child: FakeChild) => child.send({cmd: 'NODE_CLUSTER', errno: null, key: KEY, ack: seq++, sockname: {address: '127.0.0.1', port: 3000}}, null);
	/** node:cluster hands the worker a connection; returns the message's seq. */
	const handOff = (child: FakeChild, handle: RawHandle) => {
		const at = seq++;
		child.send({cmd: 'NODE_CLUSTER', act: 'newconn', key: KEY, seq: at}, handle);
		return at;
	};

	return {watch, stranded, fork, listen, handOff};
}

test('a refused connection is stranded when no worker is left on its port, and only then', async t => {
	const {stranded, fork, listen, handOff} = setup();
	const [one, two] = [fork(1), fork(2)];
	listen(one);
	listen(two);
	const first = {};
	const second = {};
	const toOne = handOff(one, first);
	const toTwo = handOff(two, second);

	// One closes its server and refuses what was on its way: the other still listens, node:cluster queues it there.
	one.answer({act: 'close', key: KEY, seq: seq++});
	one.answer({ack: toOne, accepted: false});
	await acted();
	t.deepEqual(stranded, []);

	// The last one closes and refuses: node:cluster has closed the port and dropped its queue.
	two.answer({act: 'close', key: KEY, seq: seq++});
	two.answer({ack: toTwo, accepted: false});
	await acted();
	t.is(stranded.length, 1);
	t.is(stranded[0], second);
});

test('a refused connection node:cluster sends on at once is not stranded; an accepted one never is', async t => {
	const {stranded, fork, listen, handOff} = setup();
	const one = fork(1);
	listen(one);
	const handle = {};
	const first = handOff(one, handle);
	one.answer({act: 'close', key: KEY, seq: seq++});
	// Sent on to another worker (node:cluster's own listener does so as it hears the refusal, before ours hears it).
	const two = fork(2);
	listen(two);
	const again = handOff(two, handle);
	one.answer({ack: first, accepted: false});
	await acted();
	t.deepEqual(stranded, []);

	two.answer({ack: again, accepted: true});
	two.answer({act: 'close', key: KEY, seq: seq++});
	await acted();
	t.deepEqual(stranded, []);
});

test('a connection its worker never answered is stranded once the worker has exited and its channel closed, whichever came first', t => {
	for (const order of [['exit', 'disconnect'], ['disconnect', 'exit']] as const) {
		const {stranded, fork, listen, handOff} = setup();
		const one = fork(1);
		listen(one);
		const handle = {};
		handOff(one, handle);
		if (order[0] === 'exit') {
			one.exit();
			t.deepEqual(stranded, [], 'an answer may still come until the channel closes');
			one.closeChannel();
		} else {
			one.closeChannel();
			t.deepEqual(stranded, [], 'a worker still running may have taken it');
			one.exit();
		}

		t.deepEqual(stranded, [handle], order.join(' then '));
	}
});

test('an answer that comes after the exit, before the channel closes, is heard', t => {
	const {stranded, fork, listen, handOff} = setup();
	const one = fork(1);
	listen(one);
	const at = handOff(one, {});
	one.exit();
	one.answer({ack: at, accepted: true});
	one.closeChannel();
	t.deepEqual(stranded, []);
});

test('messages that are not node:cluster\'s pass through send unchanged', t => {
	const {fork} = setup();
	const one = fork(1);
	const message = {type: 'drain', rejectPeriodMs: 100};
	t.true(one.send(message));
	t.is(one.sent.at(-1), message);
});
