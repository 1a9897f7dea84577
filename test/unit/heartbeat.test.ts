// The heartbeat's event-loop delay (src/worker/heartbeat.ts LoopDelay): the
// sampling timer's lateness, the worst between two beats.
import test from 'ava';
import {LoopDelay} from '../../src/worker/heartbeat.js';

const PERIOD = 100;

/** Ticks on time from `from` to `to` (ms), as an idle loop's timer fires. */
function onTime(delay: LoopDelay, from: number, to: number): void {
	for (let at = from + PERIOD; at <= to; at += PERIOD) {
		delay.tick(at);
	}
}

test('a loop at rest reads 0: the lateness alone, not the period', t => {
	const delay = new LoopDelay(0, PERIOD);
	onTime(delay, 0, 1000);
	t.is(delay.take(), 0);
});

test('a stall reads its length, within one period, in the beat after it; the next beat reads the loop at rest again', t => {
	const delay = new LoopDelay(0, PERIOD);
	onTime(delay, 0, 300);
	// The loop blocked from 330 to 1030: the tick due at 400 fires at 1030.
	delay.tick(1030);
	onTime(delay, 1030, 1930);
	const read = delay.take();
	t.true(read > 700 - PERIOD && read <= 700, `read ${read}`);
	onTime(delay, 1930, 2930);
	t.is(delay.take(), 0);
});

test('a stall that begins right after a beat is measured (a histogram\'s reset() dropped the first sample after it)', t => {
	const delay = new LoopDelay(0, PERIOD);
	onTime(delay, 0, 1000);
	t.is(delay.take(), 0, 'the beat, at 1000');
	// Blocked from 1000 to 1600, right after the beat: the tick due at 1100 fires at 1600.
	delay.tick(1600);
	t.is(delay.take(), 500);
});

test('the worst of several stalls between two beats, rounded to whole ms', t => {
	const delay = new LoopDelay(0, PERIOD);
	delay.tick(150.4);
	delay.tick(250.4);
	delay.tick(600.7);
	delay.tick(700.7);
	t.is(delay.take(), 250);
});
