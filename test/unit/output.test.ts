// The workers' output on its way through the primary (src/primary/output.ts,
// src/primary/own-lines.ts): bytes as they came, a whole line at a time, and a
// worker's own log lines kept whole where the app left a line unfinished (found
// by a hostile trial: `progress: 50%{"level":"info",...,"msg":"drain started"}`).
import test from 'ava';
import {LastLines, LineForwarder, LineOutput, sharedLine, type ForwarderOptions} from '../../src/primary/output.js';
import {OwnLines} from '../../src/primary/own-lines.js';
import {findStack} from '../../src/primary/watchdog.js';
import {HUNG_STACK_MESSAGE} from '../../src/protocol.js';

const PID = 4242;
/** A line as the worker's logger writes it (logger.ts). */
const ours = (msg: string, pid = PID): string => `{"level":"info","time":1700000000000,"role":"worker","pid":${pid},"worker":1,"msg":"${msg}"}\n`;

function forward(options: ForwarderOptions = {workerPid: PID}) {
	const out: Buffer[] = [];
	const lines: string[] = [];
	const forwarder = new LineForwarder({write: (data: string | Buffer) => out.push(Buffer.from(data))}, {onLine: line => lines.push(line), ...options});
	return {forwarder, out, lines, text: () => Buffer.concat(out).toString('utf8')};
}

test('forwarding: a worker\'s bytes go out as they came, a whole line at a time; its lines are read as text', t => {
	const {forwarder, out, lines} = forward();
	forwarder.push(Buffer.from([0xFF, 0xFE]));
	t.deepEqual(out, [], 'half a line is held');
	forwarder.push(Buffer.from([0x0A, 0xC3]));
	// A UTF-8 character split across two chunks.
	forwarder.push(Buffer.from([0xA9, 0x0A]));
	forwarder.push('tail');
	forwarder.flush();
	t.deepEqual([...Buffer.concat(out)], [0xFF, 0xFE, 0x0A, 0xC3, 0xA9, 0x0A, ...Buffer.from('tail\n')]);
	t.deepEqual(lines, ['\uFFFD\uFFFD', 'é', 'tail']);
});

test('our log line written while the app\'s line is unfinished goes out whole, at once; the app\'s line, once ended, reads as one', t => {
	const {forwarder, lines, text} = forward();
	forwarder.push('progress: 50%');
	forwarder.push(ours('drain started'));
	t.is(text(), ours('drain started'), 'ours is not held behind the app\'s line');
	forwarder.push(ours('running shutdown hooks'));
	forwarder.push(' done\n');
	t.is(text(), `${ours('drain started')}${ours('running shutdown hooks')}progress: 50% done\n`);
	t.deepEqual(lines, [ours('drain started').trim(), ours('running shutdown hooks').trim(), 'progress: 50% done']);
	for (const line of lines.filter(line => line.startsWith('{'))) {
		t.notThrows(() => JSON.parse(line));
	}
});

test('the same however the pipe cuts the bytes: one chunk, or two at any point', t => {
	const input = `before\nprogress: 50%${ours('drain started')}${ours('rejecting new requests')} done\nafter\n`;
	const expected = `before\n${ours('drain started')}${ours('rejecting new requests')}progress: 50% done\nafter\n`;
	for (let cut = 0; cut <= input.length; cut++) {
		const {forwarder, text} = forward();
		forwarder.push(input.slice(0, cut));
		forwarder.push(input.slice(cut));
		t.is(text(), expected, `cut at ${cut}`);
	}
});

test('an unfinished line the app never ends comes out last, ended as before, after our lines', t => {
	const {forwarder, text} = forward();
	forwarder.push('progress: 50%');
	forwarder.push(ours('worker drained'));
	forwarder.flush();
	t.is(text(), `${ours('worker drained')}progress: 50%\n`);
});

test('an unfinished line that is not UTF-8 comes out byte for byte', t => {
	const {forwarder, out} = forward();
	forwarder.push(Buffer.from([0xFF, 0xFE]));
	forwarder.push(ours('drain started'));
	forwarder.push(Buffer.from([0x41, 0x0A]));
	t.deepEqual([...Buffer.concat(out)], [...Buffer.from(ours('drain started')), 0xFF, 0xFE, 0x41, 0x0A]);
});

test('only this worker\'s own lines are moved: another pid\'s, the app\'s JSON and a forwarder without a pid leave the bytes as they were', t => {
	const other = `progress${ours('drain started', 999)}`;
	const appJson = 'note: {"role":"worker","pid":4242,"worker":1}\n';
	const {forwarder, text} = forward();
	forwarder.push(other);
	forwarder.push(appJson);
	t.is(text(), `${other}${appJson}`);
	const plain = forward({});
	plain.forwarder.push(`progress${ours('drain started')}`);
	t.is(plain.text(), `progress${ours('drain started')}`);
});

test('a hung worker\'s stack is found on stderr after a line the app left unfinished there', t => {
	const stderr = new LastLines();
	const {forwarder} = forward({workerPid: PID, onLine: stderr.add});
	const line = JSON.stringify({level: 'error', time: 1_700_000_000_000, role: 'worker', pid: PID, worker: 1, blockedMs: 5000, captureMs: 3, stack: ['at spin (app.js:1:1)'], msg: HUNG_STACK_MESSAGE});
	forwarder.push('working...');
	forwarder.push(`${line}\n`);
	t.deepEqual(findStack(stderr.text), {stack: ['at spin (app.js:1:1)']});
});

test('own lines: found only where they do not start a line', t => {
	const own = new OwnLines(PID);
	t.is(own.gluedIn(Buffer.from(`${ours('a')}text\n${ours('b')}`)), undefined, 'each one starts a line');
	const glued = Buffer.from(`${ours('a')}text${ours('b')}`);
	const start = ours('a').length + 'text'.length;
	t.deepEqual(own.gluedIn(glued), {start, end: glued.length});
	t.is(own.gluedIn(Buffer.from(`text,"role":"worker","pid":${PID},"worker":1}\n`)), undefined, 'the marker without a line\'s start');
});

test('a line longer than 1 MiB goes out in pieces; what anyone else writes meanwhile starts a line of its own (found by a hostile trial: a \\r meter swallowed every line after it)', t => {
	const out: Buffer[] = [];
	const output = new LineOutput({write: (data: string | Buffer) => out.push(Buffer.from(data))});
	const meter = new LineForwarder(output, {workerPid: PID});
	const other = new LineForwarder(output, {workerPid: PID + 1});
	const piece = '\rimported 1 rows'.repeat(70_000);
	meter.push(piece);
	t.is(Buffer.concat(out).length, piece.length, 'over 1 MiB: passed on, not held');
	meter.push('\rimported 2 rows');
	meter.push('\rimported 3 rows');
	output.write(ours('drain started', 1));
	other.push(ours('rejecting new requests', PID + 1));
	meter.push('\rdone\n');
	const lines = Buffer.concat(out).toString('utf8').split('\n');
	t.deepEqual(lines, [
		piece,
		ours('drain started', 1).trim(),
		ours('rejecting new requests', PID + 1).trim(),
		// The meter's line goes on after them, its bytes in their order.
		'\rimported 2 rows\rimported 3 rows\rdone',
		'',
	], 'the logger\'s line and another worker\'s each a line of their own');
});

test('own lines: the app\'s JSON holding an object shaped like ours, with this pid, is left as it is (found by a hostile trial)', t => {
	const {forwarder, text} = forward();
	const audit = `{"audit":${ours('user login').trim()}}\n`;
	forwarder.push(audit);
	t.is(text(), audit);
});

test('after a piece of the app\'s overlong line, the worker\'s own next line starts a line of its own (found by a hostile trial)', t => {
	const out: Buffer[] = [];
	const forwarder = new LineForwarder(new LineOutput({write: (data: string | Buffer) => out.push(Buffer.from(data))}), {workerPid: PID});
	const piece = `\r${'x'.repeat(1024 * 1024 + 10)}`;
	forwarder.push(piece);
	forwarder.push(ours('drain started'));
	forwarder.push('\rmore\n');
	t.deepEqual(Buffer.concat(out).toString('utf8').split('\n'), [piece, ours('drain started').trim(), '\rmore', '']);
});

test('stdout and stderr that are one file share their line: a piece left on one is ended before the other writes (found by a hostile trial: 2>&1)', t => {
	const out: string[] = [];
	const line = {midLine: undefined};
	const stdout = new LineOutput({write: (data: string | Buffer) => out.push(String(data))}, line);
	const stderr = new LineOutput({write: (data: string | Buffer) => out.push(String(data))}, line);
	const appErrors = new LineForwarder(stderr);
	appErrors.push('E'.repeat(1024 * 1024 + 1));
	stdout.write(ours('worker listening', 1));
	t.deepEqual(out.join('').split('\n'), ['E'.repeat(1024 * 1024 + 1), ours('worker listening', 1).trim(), '']);
	t.is(sharedLine(1, 1)?.midLine, undefined, 'one descriptor is one file');
	t.truthy(sharedLine(1, 1));
	t.is(sharedLine(1, 12_345), undefined, 'a descriptor that is not open shares nothing');
});
