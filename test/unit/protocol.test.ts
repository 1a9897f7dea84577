import test from 'ava';
import {envelope, parseMessage, PROTOCOL_VERSION, TO_PRIMARY, TO_WORKER, UNSENT_HOOK_FAILURE_EXIT, type ToPrimary, type ToWorker} from '../../src/protocol.js';
import {ExitCode} from '../../src/exit-codes.js';

const toPrimary = ['attached', 'inflight', 'hooks', 'drained'] as const;

test('our messages round-trip through the envelope', t => {
	const message = {type: 'inflight', inflight: 3, served: 10, rejected: 2, upgrades: 1, streams: 4} as const;
	t.deepEqual(parseMessage<ToPrimary>(envelope(message), toPrimary), {kind: 'ours', message: {v: PROTOCOL_VERSION, ...message}});
});

test('the app\'s own messages are foreign, whatever their shape', t => {
	for (const raw of [undefined, null, 'drain', 42, [], {type: 'drain'}, {cmd: 'NODE_CLUSTER'}, {app: {gracefulCluster: {}}}]) {
		t.is(parseMessage(raw, toPrimary).kind, 'foreign');
	}
});

test('ours but malformed is reported, never thrown', t => {
	const cases: Array<[unknown, RegExp]> = [
		[{gracefulCluster: 'x'}, /not an object/],
		[{gracefulCluster: {v: 2, type: 'drained'}}, /protocol version 2/],
		[{gracefulCluster: {v: 1, type: 'reboot'}}, /unexpected message type/],
		[{gracefulCluster: {v: 1, type: 'drain', servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 0}}, /unexpected message type/],
		[{gracefulCluster: {v: 1, type: 'inflight', inflight: -1, served: 0, rejected: 0}}, /inflight\.inflight/],
		[{gracefulCluster: {v: 1, type: 'inflight', inflight: 1.5, served: 0, rejected: 0}}, /inflight\.inflight/],
		[{gracefulCluster: {v: 1, type: 'drained', served: '3', rejected: 0, durationMs: 1}}, /drained\.served/],
		[{gracefulCluster: {v: 1, type: 'inflight', inflight: 0, served: 0, rejected: 0}}, /inflight\.upgrades/],
		[{gracefulCluster: {v: 1, type: 'inflight', inflight: 0, served: 0, rejected: 0, upgrades: 0, streams: -1}}, /inflight\.streams/],
		[{gracefulCluster: {v: 1, type: 'drained', served: 0, rejected: 0, durationMs: 1}}, /drained\.closedLongLived/],
	];
	for (const [raw, reason] of cases) {
		const parsed = parseMessage(raw, toPrimary);
		t.is(parsed.kind, 'invalid');
		t.regex(parsed.kind === 'invalid' ? parsed.reason : '', reason);
	}
});

test('fields added later are optional, so an older copy on the other side still speaks: drain and retire without a signal, drained without hooksFailed, counts without aborted', t => {
	const cases: Array<[ToPrimary | ToWorker, 'ours' | 'invalid']> = [
		[{type: 'drain', servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 1}, 'ours'],
		[{type: 'drain', servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 1, signal: 'SIGQUIT'}, 'ours'],
		[{type: 'drain', servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 1, signal: 'rm -rf' as NodeJS.Signals}, 'invalid'],
		[{type: 'retire', lingerMs: 1000}, 'ours'],
		[{type: 'retire', lingerMs: 1000, signal: 'SIGUSR2'}, 'ours'],
		[{type: 'drained', served: 0, rejected: 0, durationMs: 1, closedLongLived: 0}, 'ours'],
		[{type: 'drained', served: 0, rejected: 0, durationMs: 1, closedLongLived: 0, hooksFailed: 2}, 'ours'],
		[{type: 'drained', served: 0, rejected: 0, durationMs: 1, closedLongLived: 0, hooksFailed: -1}, 'invalid'],
		[{type: 'hook-failed', hook: 'SIGTERM listener shutdown'}, 'ours'],
		[{type: 'inflight', inflight: 0, served: 1, aborted: 2, rejected: 0, upgrades: 0, streams: 0}, 'ours'],
		[{type: 'inflight', inflight: 0, served: 1, aborted: -1, rejected: 0, upgrades: 0, streams: 0}, 'invalid'],
		[{type: 'hooks', served: 1, rejected: 0}, 'ours'],
		[{type: 'hooks', served: 1, aborted: 1.5, rejected: 0}, 'invalid'],
		[{type: 'drained', served: 0, aborted: 3, rejected: 0, durationMs: 1, closedLongLived: 0}, 'ours'],
		[{type: 'hooks', served: 1, rejected: 0, redirected: 2}, 'ours'],
		[{type: 'inflight', inflight: 0, served: 1, rejected: 0, redirected: -1, upgrades: 0, streams: 0}, 'invalid'],
		[{type: 'drained', served: 0, rejected: 0, redirected: 0.5, durationMs: 1, closedLongLived: 0}, 'invalid'],
	];
	for (const [message, kind] of cases) {
		t.is(parseMessage(envelope(message), [...TO_PRIMARY, ...TO_WORKER]).kind, kind, JSON.stringify(message));
	}
});

test('each side accepts every message of its direction and none of the other\'s', t => {
	t.true(TO_PRIMARY.includes('hook-failed'));
	t.false(TO_PRIMARY.includes('drain' as never));
	t.deepEqual([...TO_WORKER].sort(), ['drain', 'end-reject', 'metrics-request', 'report-now', 'retire', 'serve-now', 'shedding']);
	t.true(TO_PRIMARY.includes('ready') && TO_PRIMARY.includes('not-ready'));
});

test('a worker that could not send its failed hook exits with the CLI\'s own code for one', t => {
	t.is(UNSENT_HOOK_FAILURE_EXIT, ExitCode.HOOK_FAILED);
});
