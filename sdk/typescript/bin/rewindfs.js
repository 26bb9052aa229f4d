#!/usr/bin/env node
// `rewindfs` on PATH for npm installs: runs the binary of the per-platform package with the same
// arguments and stdio, and exits as it does. A Ctrl-C reaches the binary from the terminal (same
// process group); SIGTERM and SIGHUP sent to this process are passed on.
import { spawn } from "node:child_process";
import { binaryPath } from "../binary.js";

let bin;
try {
  bin = binaryPath();
} catch (e) {
  console.error(`rewindfs: ${e.message}`);
  process.exit(1);
}
const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
process.on("SIGINT", () => {});
for (const s of ["SIGTERM", "SIGHUP"]) process.on(s, () => child.kill(s));
child.on("error", (e) => {
  console.error(`rewindfs: running ${bin}: ${e.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});
