// Validates the Prometheus Operator objects of rendered manifests (stdin, JSON: an array of
// objects) with the validators of @kubernetes-models/prometheus-operator, generated from the
// operator's own Go types. Prints one line per problem; exits 1 if any, 2 on an unknown kind.
// Run by deploy/tests/kubernetes.rs: argv[2] is the node_modules `cargo xtask setup` fills.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const models = join(process.argv[2], "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1");
const kinds = {};
for (const kind of ["ServiceMonitor", "PodMonitor", "PrometheusRule"]) {
  kinds[kind] = (await import(pathToFileURL(join(models, `${kind}.js`)).href))[kind];
}
const objects = JSON.parse(readFileSync(0, "utf8"));
let problems = 0;
let checked = 0;
for (const object of objects) {
  if (object.apiVersion !== "monitoring.coreos.com/v1") continue;
  const Kind = kinds[object.kind];
  const name = `${object.kind}/${object.metadata?.name}`;
  if (!Kind) {
    console.log(`${name}: no validator for this kind`);
    process.exit(2);
  }
  checked += 1;
  try {
    new Kind(object).validate();
  } catch (e) {
    problems += 1;
    console.log(`${name}: ${e.message}`);
  }
}
console.log(`checked ${checked} monitoring.coreos.com/v1 objects, ${problems} invalid`);
process.exit(problems ? 1 : 0);
