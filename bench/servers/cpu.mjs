// The capacity benchmark's server (bench/capacity.js): every request burns
// CPU_MS of CPU (a busy loop, default 0) and the answer names the pod that served
// it (`x-pod: $POD`, and in the body), so that a client behind a load balancer
// can tell the pods apart.
//   PORT   = port to listen on (127.0.0.1 only)
//   POD    = the pod's name (default: the process id)
//   CPU_MS = CPU per request, in ms
// Prints one JSON line {msg: 'listening', port, pid} once it listens.
import http from 'node:http';
import {performance} from 'node:perf_hooks';
import process from 'node:process';

const port = Number(process.env.PORT ?? 0);
const pod = process.env.POD ?? String(process.pid);
const cpuMs = Number(process.env.CPU_MS ?? 0);
const body = Buffer.from(`${pod}\n`);
let sink = 0;

function burn(ms) {
	const end = performance.now() + ms;
	while (performance.now() < end) {
		sink = (sink * 31 + 7) | 0;
	}
}

const server = http.createServer((_request, response) => {
	if (cpuMs > 0) {
		burn(cpuMs);
	}

	response.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': body.length, 'x-pod': pod});
	response.end(body);
});

server.listen(port, '127.0.0.1', () => {
	process.stdout.write(`${JSON.stringify({msg: 'listening', port: server.address().port, pid: process.pid, sink, time: Date.now()})}\n`);
});
