// Bad input through the real CLI: exit 2 at once, a message naming the problem, nothing started.
import test from 'ava';
import {fixture, start} from '../helpers/cluster.js';

const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
	['unknown flag', ['--wrokers', '2', fixture('app.mjs')], {}, /Unknown argument: wrokers/],
	['workers not a number', ['--workers', 'abc', fixture('app.mjs')], {}, /--workers.*"abc"/],
	['grace period not a duration', ['--grace-period', 'banana', fixture('app.mjs')], {}, /--grace-period.*"banana" is not a duration/],
	['serve + reject >= grace', ['--reject-period', '10s', '--grace-period', '10s', fixture('app.mjs')], {}, /must be less than --grace-period/],
	['missing script', ['./nope/server.js'], {}, /Script not found: \.\/nope\/server\.js/],
	['no script', [], {}, /No script given/],
	['bad environment value', [fixture('app.mjs')], {GRACEFUL_CLUSTER_WORKERS: 'many'}, /--workers \(GRACEFUL_CLUSTER_WORKERS\): "many"/],
];

for (const [name, args, env, pattern] of cases) {
	test(`usage error: ${name}`, async t => {
		const cli = start(t, args, {env});
		const exit = await cli.exited;
		t.is(exit.code, 2);
		t.regex(cli.text(), pattern);
		t.regex(cli.text(), /^graceful-cluster: /m);
		t.false(cli.text().includes('starting workers'));
	});
}

test('--help lists the options and exits 0', async t => {
	const cli = start(t, ['--help']);
	t.is((await cli.exited).code, 0);
	t.regex(cli.text(), /--serve-period[\s\S]*--reject-period[\s\S]*--grace-period/);
});
