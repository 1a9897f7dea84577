// The primary's guard over its signals (src/own-signals.ts): what is not ours
// is taken off and reported. On signals this test process never receives.
import test from 'ava';
import {own, SignalGuard, type SetAside} from '../../src/own-signals.js';

const noop = (): void => {};

test.serial('listeners there before the guard and added after it are taken off and reported, in order; ours stay', async t => {
	function preloadExit(): void {}
	process.on('SIGVTALRM', preloadExit);
	const guard = new SignalGuard(['SIGVTALRM', 'SIGXCPU']);
	t.is(process.listenerCount('SIGVTALRM'), 0);

	const ours = own(noop);
	process.on('SIGXCPU', ours);
	process.once('SIGXCPU', function lateOnce() {});
	process.prependListener('SIGVTALRM', () => {});
	// Not watched.
	process.on('SIGPWR', noop);
	await Promise.resolve();
	t.deepEqual(process.listeners('SIGXCPU'), [ours]);
	t.is(process.listenerCount('SIGVTALRM'), 0);
	t.is(process.listenerCount('SIGPWR'), 1);

	const reported: SetAside[] = [];
	guard.reportTo(setAside => reported.push(setAside));
	t.deepEqual(reported, [
		{signal: 'SIGVTALRM', listener: 'preloadExit'},
		{signal: 'SIGXCPU', listener: 'lateOnce'},
		{signal: 'SIGVTALRM', listener: 'an anonymous function'},
	]);

	process.on('SIGVTALRM', function later() {});
	await Promise.resolve();
	t.like(reported.at(-1), {signal: 'SIGVTALRM', listener: 'later'});
	process.removeListener('SIGXCPU', ours);
	process.removeListener('SIGPWR', noop);
});
