// Our JSON lines (src/logger.ts) are pino's for what we log: pino itself (a
// devDependency, for this comparison only) writes the same calls beside ours.
import test from 'ava';
import {execFile, spawn} from 'node:child_process';
import {once} from 'node:events';
import {Writable} from 'node:stream';
import {promisify} from 'node:util';
import {pino} from 'pino';
import {createLogger, LOG_LEVELS, type LineDestination, type Logger} from '../../src/logger.js';
import {ROOT} from '../helpers/cluster.js';

/** A destination that keeps each line, parsed, without its time (in `times`), and the raw text. */
function collect(): {lines: Array<Record<string, unknown>>; times: number[]; text: string[]; destination: LineDestination & Writable} {
	const lines: Array<Record<string, unknown>> = [];
	const times: number[] = [];
	const text: string[] = [];
	const destination = new Writable({
		write(chunk: Buffer, _encoding, done) {
			for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
				text.push(line);
				const {time, ...rest} = JSON.parse(line) as Record<string, unknown>;
				lines.push(rest);
				times.push(time as number);
			}

			done();
		},
	});
	return {lines, times, text, destination};
}

/** pino as logger.ts used it before it wrote its own lines. */
function pinoLogger(level: string, workerId: number | undefined, destination: Writable): Logger {
	return pino({
		level,
		base: workerId === undefined ? {role: 'worker', pid: process.pid} : {role: 'worker', pid: process.pid, worker: workerId},
		formatters: {level: label => ({level: label})},
		timestamp: () => `,"time":${Date.now()}`,
	}, destination) as unknown as Logger;
}

class CodedError extends Error {
	code = 'ECODED';
	errno = -5;
}

/** The odd values logAll logs: made once, so that both loggers see the same stacks. */
const ERRORS = (() => {
	const shared = {x: 1};
	const circular: Record<string, unknown> = {name: 'loop', shared};
	circular['self'] = circular;
	const selfReferring = Object.assign(new Error('refers to itself'), {self: undefined as unknown});
	selfReferring.self = selfReferring;
	const withCircularData = Object.assign(new Error('circular data'), {data: circular});
	const throwingToJson = Object.assign(new Error('toJSON throws'), {extra: {toJSON() {
		throw new Error('tj');
	}}});
	const vCause = new Error('the cause');
	const vError = Object.assign(new Error('outer: the cause is in here already'), {cause: () => vCause});
	return {
		coded: new CodedError('boom'),
		typed: new TypeError('typed'),
		aggregate: new AggregateError([new Error('one'), new RangeError('two')], 'many'),
		caused: new Error('outer', {cause: new Error('middle', {cause: new TypeError('inner')})}),
		vError,
		selfReferring,
		withCircularData,
		throwingToJson,
		circular,
		shared,
		alone: new Error('logged alone'),
	};
})();

/** Every shape of call the code makes, and values an app can put in a field (a hook's name, a thrown value). */
function logAll(logger: Logger): void {
	logger.info({signal: 'SIGTERM', inflight: 3, ok: true, none: null, list: ['a', 1], nested: {deep: {x: 'y'}}}, 'drain started');
	logger.info('no fields');
	logger.warn({worker: 2, text: 'quotes " and \\ and \n newlines, \u0000 and é, 😀'}, 'escapes: " \\ \n');
	logger.debug({skipped: undefined, fn() {}, kept: 1}, 'undefined and functions are left out');
	logger.error({err: ERRORS.coded}, 'a shutdown hook failed; running the rest');
	logger.error({err: ERRORS.typed, hook: 'db'}, 'a hook failed');
	logger.error({err: 'a thrown string'}, 'not an error');
	logger.error({err: {message: 'error-like', extra: 1}}, 'error-like');
	logger.fatal({err: ERRORS.aggregate}, 'aggregate');
	logger.info({numbers: [Number.NaN, Number.POSITIVE_INFINITY, -0, 1.5]}, 'numbers');
	logger.trace('not written at debug');
	logger.info({}, '');
	logger.info({only: 'fields'});
	logger.error({err: ERRORS.caused}, 'an error with causes');
	logger.error({err: ERRORS.vError}, 'a VError-style cause');
	logger.error({err: ERRORS.selfReferring}, 'an error referring to itself');
	logger.error({err: ERRORS.withCircularData}, 'an error with circular data');
	logger.error({err: ERRORS.throwingToJson}, 'an error whose data cannot be written');
	logger.info({circular: ERRORS.circular, big: 10n, twice: [ERRORS.shared, ERRORS.shared]}, 'a circular object, a BigInt, one object twice');
	logger.info({twice: [ERRORS.shared, ERRORS.shared], big: 12n}, 'one object twice in a field JSON refuses');
	logger.error(ERRORS.alone);
	logger.error(ERRORS.alone, 'an error alone, with a message');
	logger.warn({err: ERRORS.typed});
}

test('the lines are pino\'s for every call we make: the same fields, in the same order, errors included', t => {
	const ours = collect();
	const theirs = collect();
	logAll(createLogger({role: 'worker', level: 'debug', workerId: 3, destination: ours.destination}));
	logAll(pinoLogger('debug', 3, theirs.destination));
	t.is(ours.lines.length, 22);
	t.deepEqual(ours.lines, theirs.lines);
	// The same text too, but for the time.
	const withoutTime = (line: string) => line.replace(/"time":\d+/, '"time":0');
	t.deepEqual(ours.text.map(withoutTime), theirs.text.map(withoutTime));
	t.like(ours.lines[0], {level: 'info', role: 'worker', pid: process.pid, worker: 3, signal: 'SIGTERM', msg: 'drain started'});
	t.like(ours.lines[4], {err: {type: 'CodedError', message: 'boom', code: 'ECODED', errno: -5}});
});

test('without a worker id (the primary, a standalone app), as pino', t => {
	const ours = collect();
	const theirs = collect();
	createLogger({role: 'worker', level: 'info', destination: ours.destination}).info({a: 1}, 'x');
	pinoLogger('info', undefined, theirs.destination).info({a: 1}, 'x');
	t.deepEqual(ours.lines, theirs.lines);
	t.false('worker' in ours.lines[0]!);
});

test('the time is epoch milliseconds, taken as the line is written', t => {
	const {times, destination} = collect();
	const before = Date.now();
	createLogger({role: 'primary', level: 'info', destination}).info('now');
	t.true(times[0]! >= before && times[0]! <= Date.now());
});

test('isLevelEnabled: what pino answers, for every level at every level', t => {
	for (const level of LOG_LEVELS) {
		const ours = createLogger({role: 'worker', level, workerId: 1});
		const theirs = pino({level});
		t.is(ours.level, level);
		for (const asked of [...LOG_LEVELS, 'nonsense', 'constructor', '__proto__']) {
			t.is(ours.isLevelEnabled(asked), theirs.isLevelEnabled(asked), `${asked} at ${level}`);
		}
	}
});

test('an error with causes: their messages and stacks joined into its own, as pino does', t => {
	const {lines, destination} = collect();
	createLogger({role: 'worker', level: 'info', destination}).error({err: ERRORS.caused}, 'caused');
	const err = lines[0]!['err'] as Record<string, unknown>;
	t.is(err['message'], 'outer: middle: inner');
	t.regex(String(err['stack']), /^Error: outer\n[^]*\ncaused by: Error: middle\n[^]*\ncaused by: TypeError: inner\n/);
	t.false('cause' in err);
});

test('a field that cannot be written at all (its toJSON throws) is pino\'s placeholder; the log call never throws', t => {
	const {lines, destination} = collect();
	const logger = createLogger({role: 'worker', level: 'info', destination});
	const getterThrows = {get value() {
		throw new Error('getter');
	}};
	t.notThrows(() => {
		logger.error({err: ERRORS.throwingToJson, hook: 'db'}, 'a shutdown hook failed; running the rest');
		logger.info({getterThrows}, 'a getter that throws');
	});
	t.like(lines[0], {hook: 'db', err: '[unable to serialize, circular reference is too complex to analyze]', msg: 'a shutdown hook failed; running the rest'});
	t.like(lines[1], {getterThrows: '[unable to serialize, circular reference is too complex to analyze]', msg: 'a getter that throws'});
});

test('a level that is not one throws at once', t => {
	t.throws(() => createLogger({role: 'worker', level: 'loud'}), {message: 'unknown level loud'});
	t.throws(() => createLogger({role: 'worker', level: 'constructor'}));
});

test('a method can be called detached, and below the level it writes nothing', t => {
	const {lines, destination} = collect();
	const logger = createLogger({role: 'worker', level: 'warn', workerId: 4, destination});
	const {warn, info} = logger;
	warn('detached call');
	info('below the level');
	t.deepEqual(lines.map(line => line['msg']), ['detached call']);
});

const run = promisify(execFile);

test('stdout: lines written just before process.exit are all there', async t => {
	const script = `
		const {createLogger} = await import('./dist/src/logger.js');
		const logger = createLogger({role: 'primary', level: 'info'});
		for (let i = 0; i < 2000; i++) logger.info({i, pad: 'x'.repeat(500)}, 'line');
		process.exit(0);
	`;
	const {stdout} = await run(process.execPath, ['--input-type=module', '-e', script], {cwd: ROOT, maxBuffer: 10 * 1024 * 1024});
	const lines = stdout.trim().split('\n').map(line => JSON.parse(line) as {i: number});
	t.is(lines.length, 2000);
	t.deepEqual(lines.map(line => line.i), Array.from({length: 2000}, (_, i) => i));
});

test('syncWriter on a non-blocking pipe that fills: waits and writes everything, in order; a reader that has gone drops the rest, the process goes on', async t => {
	// process.stdout on a pipe makes the descriptor non-blocking: a write to a full pipe answers EAGAIN.
	const script = `
		process.stdout;
		const {syncWriter} = await import('./dist/src/logger.js');
		const out = syncWriter(1);
		const chunk = i => String(i).padStart(6, '0') + 'y'.repeat(64 * 1024 - 7) + '\\n';
		for (let i = 0; i < 64; i++) out.write(chunk(i));
		process.stderr.write('wrote all\\n');
		for (let i = 64; i < 128; i++) out.write(chunk(i));
		process.stderr.write('still running\\n');
	`;
	const child = spawn(process.execPath, ['--input-type=module', '-e', script], {cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe']});
	t.teardown(() => child.kill('SIGKILL'));
	let stderr = '';
	child.stderr.setEncoding('utf8').on('data', (text: string) => {
		stderr += text;
	});
	// A slow reader: the pipe is full most of the time.
	const received: Buffer[] = [];
	let length = 0;
	const enough = 64 * 64 * 1024;
	await new Promise<void>(resolve => {
		child.stdout.on('data', (chunk: Buffer) => {
			received.push(chunk);
			length += chunk.length;
			if (length >= enough) {
				child.stdout.destroy();
				resolve();
				return;
			}

			child.stdout.pause();
			setTimeout(() => child.stdout.resume(), 2);
		});
	});
	const [code] = await once(child, 'exit') as [number | null];
	const lines = Buffer.concat(received).subarray(0, enough).toString('latin1').split('\n').slice(0, -1);
	t.deepEqual(lines.map(line => Number(line.slice(0, 6))), Array.from({length: 64}, (_, i) => i), 'every line of the first 4 MiB, in order, none lost to EAGAIN');
	t.true(lines.every(line => line.length === (64 * 1024) - 1));
	t.is(code, 0, stderr);
	t.regex(stderr, /wrote all\nstill running\n/);
});

test('syncWriter on a full disk (ENOSPC): the lines are dropped, the process goes on', async t => {
	const script = `
		const {createLogger} = await import('./dist/src/logger.js');
		const logger = createLogger({role: 'primary', level: 'info'});
		logger.info('dropped');
		logger.error({err: new Error('also dropped')}, 'dropped too');
		process.stderr.write('still running\\n');
	`;
	const {openSync, closeSync} = await import('node:fs');
	const full = openSync('/dev/full', 'w');
	t.teardown(() => {
		closeSync(full);
	});
	const child = spawn(process.execPath, ['--input-type=module', '-e', script], {cwd: ROOT, stdio: ['ignore', full, 'pipe']});
	let stderr = '';
	child.stderr!.setEncoding('utf8').on('data', (text: string) => {
		stderr += text;
	});
	const [code] = await once(child, 'exit') as [number | null];
	t.is(code, 0, stderr);
	t.is(stderr, 'still running\n');
});
