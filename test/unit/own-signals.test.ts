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
		{signal: 'SIGVTALRM', listener: 'preloadExit', action: 'set aside'},
		{signal: 'SIGXCPU', listener: 'lateOnce', action: 'set aside'},
		{signal: 'SIGVTALRM', listener: 'an anonymous function', action: 'set aside'},
	]);

	process.on('SIGVTALRM', function later() {});
	await Promise.resolve();
	t.like(reported.at(-1), {signal: 'SIGVTALRM', listener: 'later', action: 'set aside'});
	guard.release('SIGXCPU', ours);
	await Promise.resolve();
	t.is(process.listenerCount('SIGXCPU'), 0, 'released: off for good');
	process.removeListener('SIGPWR', noop);
});

test.serial('a listener of ours another module takes off (removeAllListeners) is put back and reported; one taken off by release() is not', async t => {
	const guard = new SignalGuard(['SIGTTIN']);
	const reported: SetAside[] = [];
	guard.reportTo(setAside => reported.push(setAside));
	const ours = own(function drainOnSignal(): void {});
	const hold = own(function hold(): void {});
	process.on('SIGTTIN', ours);
	process.on('SIGTTIN', hold);
	process.removeAllListeners('SIGTTIN');
	await Promise.resolve();
	// Node takes them off last first.
	t.deepEqual(process.listeners('SIGTTIN').map(listener => listener.name).sort(), ['drainOnSignal', 'hold']);
	t.deepEqual(reported.map(setAside => setAside.listener).sort(), ['drainOnSignal', 'hold']);
	t.true(reported.every(setAside => setAside.signal === 'SIGTTIN' && setAside.action === 'put back'));
	guard.release('SIGTTIN', hold);
	guard.release('SIGTTIN', ours);
	await Promise.resolve();
	t.is(process.listenerCount('SIGTTIN'), 0);
	t.is(reported.length, 2);
});
