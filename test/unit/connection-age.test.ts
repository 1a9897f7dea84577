import test from 'ava';
import {drawAge} from '../../src/worker/connection-age.js';

test('each connection\'s age is drawn within ±10 % of --max-connection-age, spread over the whole range', t => {
	t.is(drawAge(60_000, () => 0), 54_000);
	t.is(drawAge(60_000, () => 0.5), 60_000);
	t.is(drawAge(60_000, () => 0.999_999), 66_000);
	const ages = Array.from({length: 1000}, () => drawAge(10_000));
	t.true(ages.every(age => age >= 9000 && age <= 11_000));
	t.true(Math.min(...ages) < 9200 && Math.max(...ages) > 10_800, 'not all alike: one pod\'s connections do not move at once');
});
