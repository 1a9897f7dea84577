// withTimeout (src/clock.ts): the one race of a promise against a timeout, on a
// fake clock (exact) and on its own unref'd timer (a worker's waits).
import {execFile} from 'node:child_process';
import {promisify} from 'node:util';
import test from 'ava';
import {withTimeout} from '../../src/clock.js';
import {FakeClock, flush} from '../helpers/fakes.js';

const never = new Promise<string>(() => {});

test('the promise settles first: its value, onTimeout never called, the timer cleared', async t => {
	const clock = new FakeClock();
	let called = 0;
	const result = withTimeout(Promise.resolve('done'), 1000, () => {
		called++;
		return 'late';
	}, clock);
	t.is(await result, 'done');
	t.is(clock.waiting, 0);
	clock.advance(1000);
	t.is(called, 0);
});

test('the time passes first: onTimeout\'s value, and nothing left waiting', async t => {
	const clock = new FakeClock();
	let settled: string | undefined;
	void withTimeout(never, 1000, () => 'timed out', clock).then(value => {
		settled = value;
	});
	clock.advance(999);
	await flush();
	t.is(settled, undefined);
	clock.advance(1);
	await flush();
	t.is(settled, 'timed out');
	t.is(clock.waiting, 0);
});

test('a rejection that comes first rejects, and clears the timer; a throwing onTimeout rejects too', async t => {
	const clock = new FakeClock();
	await t.throwsAsync(withTimeout(Promise.reject(new Error('broken')), 1000, () => 'late', clock), {message: 'broken'});
	t.is(clock.waiting, 0);
	const throwing = withTimeout(never, 10, () => {
		throw new Error('no answer');
	}, clock);
	clock.advance(10);
	await t.throwsAsync(throwing, {message: 'no answer'});
});

test('without a clock: a real timer, which never keeps the process alive', async t => {
	// Unref'd: something else must hold this process up meanwhile, as the app does in a worker.
	const holder = setTimeout(() => {}, 5000);
	t.is(await withTimeout(never, 10, () => 'timed out'), 'timed out');
	clearTimeout(holder);
	// A process whose only wait is a minute-long withTimeout exits at once.
	const clock = new URL('../../src/clock.js', import.meta.url).href;
	const started = Date.now();
	await promisify(execFile)(process.execPath, ['--input-type=module', '-e', `import {withTimeout} from '${clock}'; void withTimeout(new Promise(() => {}), 60000, () => 0);`]);
	t.true(Date.now() - started < 30_000);
});
