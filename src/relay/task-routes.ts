/** Which upstream each task lives on, and which agent created it (the tasks methods: ./tasks.ts). */

/** Task routes kept at most (the oldest forgotten first; its task then reads as unknown). */
export const MAX_TASK_ROUTES = 10_000;

/** Where one task lives and who created it. */
export interface TaskRoute {
  upstream: string;
  agentId: string;
}

/** Task id → the upstream that created it (the id is the upstream's own). */
export class TaskRoutes {
  private readonly byId = new Map<string, TaskRoute>();

  /** Remembers the task a task-augmented `tools/call` result names, if it names one. */
  rememberFrom(result: Record<string, unknown>, route: TaskRoute): void {
    const task = result.task as { taskId?: unknown } | undefined;
    if (typeof task?.taskId !== 'string' || task.taskId === '') return;
    this.byId.delete(task.taskId);
    this.byId.set(task.taskId, route);
    if (this.byId.size > MAX_TASK_ROUTES) {
      const oldest = this.byId.keys().next().value;
      if (oldest !== undefined) this.byId.delete(oldest);
    }
  }

  /** The route of a task this agent created, or undefined (another agent's task is unknown too). */
  route(taskId: unknown, agentId: string): TaskRoute | undefined {
    if (typeof taskId !== 'string') return undefined;
    const r = this.byId.get(taskId);
    return r && r.agentId === agentId ? r : undefined;
  }
}
