package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/taskgate/taskgate/policy"
)

// manifestsDir holds the Kubernetes manifests of the operations manual.
const manifestsDir = "deploy/kubernetes"

// flagsComing are flags the manifests pass that other work on taskgate
// adds (the admin API's token file); once defined in newFlagSet they are
// checked like every other flag.
var flagsComing = map[string]bool{"admin-token-file": true}

// manifest is one decoded file: its objects by kind.
type manifest struct {
	name        string
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
}

// readManifests decodes every document of every manifest strictly (an
// unknown or misspelled field fails) into the k8s.io/api types.
func readManifests(t *testing.T) []*manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestsDir, err)
	}
	var out []*manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := &manifest{name: f, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				m.deployments, obj = append(m.deployments, d), d
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				obj = c
				defer func() { m.configMaps[c.Name] = c }()
			case "v1 Secret":
				s := &corev1.Secret{}
				obj = s
				defer func() { m.secrets[s.Name] = s }()
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, p), p
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i+1, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i+1, meta.Kind, err)
			}
		}
		out = append(out, m)
	}
	return out
}

// TestKubernetesManifests: the manifests decode strictly into the
// Kubernetes API types and hold what the operations manual promises: the
// upstream as a native sidecar that outlives taskgate, taskgate's flags and
// TASKGATE_ variables all defined, its probes on the admin port (liveness
// /healthz, readiness /readyz), resources, a non-root read-only security
// context, a termination grace above drain delay + shutdown grace, the
// policy from a mounted ConfigMap directory (so it is reloaded) that
// parses, Secrets that hold the keys the pod reads, a Service on the proxy
// port.
func TestKubernetesManifests(t *testing.T) {
	flags := newFlagSet(&options{})
	for _, m := range readManifests(t) {
		t.Run(filepath.Base(m.name), func(t *testing.T) {
			if len(m.deployments) != 1 || len(m.services) != 1 {
				t.Fatalf("%d Deployments, %d Services; want one each", len(m.deployments), len(m.services))
			}
			d := m.deployments[0]
			spec := d.Spec.Template.Spec
			var tg *corev1.Container
			for i := range spec.Containers {
				if spec.Containers[i].Name == "taskgate" {
					tg = &spec.Containers[i]
				}
			}
			if tg == nil {
				t.Fatal("no taskgate container")
			}
			if len(spec.InitContainers) == 0 {
				t.Fatal("no upstream init container")
			}
			for _, c := range spec.InitContainers {
				if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
					t.Errorf("init container %s is not a native sidecar (restartPolicy: Always)", c.Name)
				}
				checkContainerBasics(t, c)
			}
			checkContainerBasics(t, *tg)
			if tg.Resources.Limits.Cpu().IsZero() {
				t.Errorf("taskgate has no CPU limit")
			}

			// Flags and variables, with their values as taskgate reads them.
			vals := map[string]string{}
			for _, a := range append(append([]string(nil), tg.Command...), tg.Args...) {
				name, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") {
					t.Errorf("taskgate argument %q is not a --flag=value", a)
					continue
				}
				if flags.Lookup(name) == nil && !flagsComing[name] {
					t.Errorf("taskgate argument %s: no such flag", a)
				}
				if !ok {
					v = "true"
				}
				vals[name] = v
			}
			for _, e := range tg.Env {
				name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, "TASKGATE_"), "_", "-"))
				if !strings.HasPrefix(e.Name, "TASKGATE_") || (flags.Lookup(name) == nil && !flagsComing[name]) {
					t.Errorf("taskgate variable %s names no flag", e.Name)
				}
				if _, dup := vals[name]; dup {
					t.Errorf("--%s given both as an argument and as %s", name, e.Name)
				}
				vals[name] = e.Value
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
					checkSecretKey(t, m, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
					vals[name] = "from-secret"
				}
			}
			o := &options{}
			fs := newFlagSet(o)
			for name, v := range vals {
				if f := fs.Lookup(name); f != nil && v != "from-secret" {
					if err := f.Value.Set(v); err != nil {
						t.Errorf("--%s=%s: %v", name, v, err)
					}
				}
			}

			// Ports and probes.
			ports := map[string]int32{}
			for _, p := range tg.Ports {
				ports[p.Name] = p.ContainerPort
			}
			wantPort := func(flagName, port string) {
				_, p, err := net.SplitHostPort(vals[flagName])
				if err != nil || p != strconv.Itoa(int(ports[port])) {
					t.Errorf("--%s=%s does not listen on the container port %q (%d)", flagName, vals[flagName], port, ports[port])
				}
			}
			wantPort("listen", "mcp")
			wantPort("admin-listen", "admin")
			for probe, want := range map[*corev1.Probe]string{tg.LivenessProbe: "/healthz", tg.ReadinessProbe: "/readyz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "admin" {
					t.Errorf("probe %+v; want GET %s on the admin port", probe, want)
				}
			}
			svc := m.services[0]
			for _, p := range svc.Spec.Ports {
				if _, ok := ports[p.TargetPort.String()]; !ok {
					t.Errorf("Service port %s targets %q, not a taskgate port", p.Name, p.TargetPort.String())
				}
			}
			for k, v := range svc.Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("Service selector %s=%s does not select the pods", k, v)
				}
			}

			// Shutdown: the grace covers drain delay + shutdown grace.
			need := o.drainDelay + o.shutdownGrace
			var grace time.Duration
			if g := spec.TerminationGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			}
			if grace <= need {
				t.Errorf("terminationGracePeriodSeconds %v; want above --drain-delay + --shutdown-grace = %v", grace, need)
			}

			// The policy: a ConfigMap key in a mounted directory (no
			// subPath: it would never see updates) that parses.
			var polOK bool
			for _, vm := range tg.VolumeMounts {
				rel, ok := strings.CutPrefix(o.configPath, strings.TrimSuffix(vm.MountPath, "/")+"/")
				if !ok {
					continue
				}
				if vm.SubPath != "" {
					t.Errorf("volume %s is mounted with subPath: ConfigMap updates would never reach taskgate", vm.Name)
				}
				for _, v := range spec.Volumes {
					if v.Name != vm.Name || v.ConfigMap == nil {
						continue
					}
					cm := m.configMaps[v.ConfigMap.Name]
					if cm == nil || cm.Data[rel] == "" {
						t.Fatalf("--config=%s: no ConfigMap %s with key %s", o.configPath, v.ConfigMap.Name, rel)
					}
					if _, err := policy.Parse([]byte(cm.Data[rel]), rel); err != nil {
						t.Errorf("the ConfigMap's policy: %v", err)
					}
					polOK = true
				}
			}
			if !polOK {
				t.Errorf("--config=%q is not a file of a mounted ConfigMap", o.configPath)
			}
			if tok := vals["admin-token-file"]; tok != "" {
				if !mountedSecretFile(t, m, spec, *tg, tok) {
					t.Errorf("--admin-token-file=%s is not a file of a mounted Secret", tok)
				}
			}
			if strings.Contains(m.name, "redis") {
				if vals["redis"] == "" {
					t.Errorf("the Redis manifest sets no --redis")
				}
				if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
					t.Errorf("the Redis manifest runs %v replicas; want several", d.Spec.Replicas)
				}
				if len(m.pdbs) != 1 {
					t.Errorf("%d PodDisruptionBudgets; want one", len(m.pdbs))
				}
			} else if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("the embedded-store manifest runs %v replicas; want 1 (tasks live in the process)", d.Spec.Replicas)
			}
		})
	}
}

// checkContainerBasics: resources and a non-root, read-only security
// context without privilege escalation or capabilities.
func checkContainerBasics(t *testing.T, c corev1.Container) {
	t.Helper()
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("container %s: want CPU and memory requests and a memory limit", c.Name)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container %s: want readOnlyRootFilesystem, no privilege escalation, capabilities drop ALL", c.Name)
	}
}

// checkSecretKey: the manifest's Secret name holds key.
func checkSecretKey(t *testing.T, m *manifest, name, key string) {
	t.Helper()
	s := m.secrets[name]
	if s == nil {
		t.Errorf("no Secret %s in the manifest", name)
		return
	}
	if _, ok := s.StringData[key]; !ok {
		if _, ok := s.Data[key]; !ok {
			t.Errorf("Secret %s has no key %s", name, key)
		}
	}
}

// mountedSecretFile reports whether path is a file of a Secret volume
// mounted in c.
func mountedSecretFile(t *testing.T, m *manifest, spec corev1.PodSpec, c corev1.Container, path string) bool {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok || vm.SubPath != "" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					checkSecretKey(t, m, v.Secret.SecretName, it.Key)
					return true
				}
			}
			if len(v.Secret.Items) == 0 {
				checkSecretKey(t, m, v.Secret.SecretName, rel)
				return true
			}
		}
	}
	return false
}

// TestManifestDecodingIsStrict: a misspelled field fails to decode.
func TestManifestDecodingIsStrict(t *testing.T) {
	var c corev1.Container
	if err := yaml.UnmarshalStrict([]byte("name: x\nimage: y\nargz: [a]\n"), &c); err == nil {
		t.Error("a container with the misspelled field argz decoded")
	}
}
