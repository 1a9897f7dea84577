// The signal table users read in docs/supervisor.md is the one the primary installs.
import test from 'ava';
import {readFileSync} from 'node:fs';
import path from 'node:path';
import {SIGNAL_ACTIONS} from '../../src/signals.js';
import {ROOT} from '../helpers/cluster.js';

const supervisor = readFileSync(path.join(ROOT, 'docs/supervisor.md'), 'utf8');

test('every handled signal is in docs/supervisor.md\'s signal table with its action', t => {
	const words = {drain: 'drain', reload: 'reload', ignore: 'ignored'} as const;
	// The table's rows: a first cell that lists signals and nothing else.
	const rows = supervisor.split('\n').filter(line => /^\| `SIG[A-Z\d]+`(, `SIG[A-Z\d]+`)* \|/.test(line));
	for (const [signal, action] of Object.entries(SIGNAL_ACTIONS)) {
		const row = rows.find(line => line.split('|')[1]!.includes(`\`${signal}\``));
		t.truthy(row, `${signal} has a row`);
		t.true(row!.split('|')[2]!.trim().startsWith(words[action]), `${signal}: ${action}`);
	}
});
