"""Course subscriptions, the example the Dynamic Consistency Boundary write-ups (and the
``eventsourcing`` library's DCB example) use: define a course with a capacity, register a
student, subscribe a student to a course.  A subscription must respect two invariants kept
in two aggregates: the course is not full, and the student holds fewer than
:data:`MAX_SUBSCRIPTIONS` courses.

DCB answers with one query over events tagged by course and student.  Here the
subscription appends to *both* streams, each at the version after the one the pipeline
read: a racer that changed either one in between (another subscription to the last seat,
the same student subscribing elsewhere, a capacity cut) makes the later append a
``version_conflict``, and its client retries on a fresh read.  The ``Subscription`` row
(unique per course and student) is what "already subscribed" reads."""

from __future__ import annotations

import uuid

import attrs
from sqlalchemy import String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, ok

#: How many courses one student may hold at once.
MAX_SUBSCRIPTIONS = 10


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


class Course(Entity):
    __tablename__ = "courses_course"
    title: Mapped[str] = mapped_column(String(200))
    capacity: Mapped[int]
    subscribers: Mapped[int] = mapped_column(default=0)


class Student(Entity):
    __tablename__ = "courses_student"
    name: Mapped[str] = mapped_column(String(200))
    subscriptions: Mapped[int] = mapped_column(default=0)


class Subscription(Entity):
    __tablename__ = "courses_subscription"
    __table_args__ = (UniqueConstraint("tenant_id", "course_id", "student_id"),)
    course_id: Mapped[uuid.UUID]
    student_id: Mapped[uuid.UUID]


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class CourseDefined:
    title: str
    capacity: int


@attrs.frozen
class CourseCapacityChanged:
    capacity: int


@attrs.frozen
class StudentRegistered:
    name: str


@attrs.frozen
class StudentSubscribed:
    """On the course's stream: one seat fewer."""

    student_id: uuid.UUID


@attrs.frozen
class SubscribedToCourse:
    """On the student's stream: one course more."""

    course_id: uuid.UUID


@attrs.frozen
class SubscriptionMade:
    course_id: uuid.UUID
    student_id: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class DefineCourse:
    title: str = attrs.field(validator=attrs.validators.min_len(1))
    capacity: int = attrs.field(validator=_positive)


@attrs.frozen
class ChangeCapacity:
    course_id: uuid.UUID
    capacity: int = attrs.field(validator=_positive)


@attrs.frozen
class RegisterStudent:
    name: str = attrs.field(validator=attrs.validators.min_len(1))


@attrs.frozen
class Subscribe:
    course_id: uuid.UUID
    student_id: uuid.UUID


@attrs.frozen
class SeatsLeft:
    course_id: uuid.UUID


@attrs.frozen
class CoursesOf:
    student_id: uuid.UUID


# --- the feature ---------------------------------------------------------------------------

courses = Feature("courses")
courses.entity(Course)
courses.entity(Student)
courses.entity(Subscription)
courses.event(CourseDefined, name="course-defined")
courses.event(CourseCapacityChanged, name="course-capacity-changed")
courses.event(StudentRegistered, name="student-registered")
courses.event(StudentSubscribed, name="student-subscribed")
courses.event(SubscribedToCourse, name="subscribed-to-course")
courses.event(SubscriptionMade, name="subscription-made")


@courses.projector(Course, CourseDefined)
def _defined(row: Course, event: CourseDefined) -> None:
    row.title, row.capacity = event.title, event.capacity


@courses.projector(Course, CourseCapacityChanged)
def _capacity(row: Course, event: CourseCapacityChanged) -> None:
    row.capacity = event.capacity


@courses.projector(Course, StudentSubscribed)
def _seat_taken(row: Course, event: StudentSubscribed) -> None:
    row.subscribers += 1


@courses.projector(Student, StudentRegistered)
def _registered(row: Student, event: StudentRegistered) -> None:
    row.name = event.name


@courses.projector(Student, SubscribedToCourse)
def _enrolled(row: Student, event: SubscribedToCourse) -> None:
    row.subscriptions += 1


@courses.projector(Subscription, SubscriptionMade)
def _made(row: Subscription, event: SubscriptionMade) -> None:
    row.course_id, row.student_id = event.course_id, event.student_id


define_course = courses.write_handler(
    "course:define",
    courses.pipeline(DefineCourse)
    .create(
        "course",
        Course,
        data=lambda c: Course(title=c.payload.title, capacity=c.payload.capacity),
        event=lambda c: CourseDefined(c.payload.title, c.payload.capacity),
    )
    .return_(lambda c: ok(c.steps["course"].id)),
)

change_capacity = courses.write_handler(
    "course:change-capacity",
    courses.pipeline(ChangeCapacity)
    .get_one("course", lambda c: select(Course).where(Course.id == c.payload.course_id))
    .guard(
        lambda c: c.payload.capacity >= c.steps["course"].subscribers,
        otherwise=lambda c: fail(
            "unprocessable",
            "the course has more students than that",
            [
                {
                    "path": "$.capacity",
                    "message": f"{c.steps['course'].subscribers} students are subscribed; "
                    f"the capacity cannot go below that, not {c.payload.capacity}",
                }
            ],
        ),
    )
    .append_event(Course, id=lambda c: c.payload.course_id, event=lambda c: CourseCapacityChanged(c.payload.capacity))
    .return_(lambda c: ok(c.payload.capacity)),
)

register_student = courses.write_handler(
    "student:register",
    courses.pipeline(RegisterStudent)
    .create(
        "student",
        Student,
        data=lambda c: Student(name=c.payload.name),
        event=lambda c: StudentRegistered(c.payload.name),
    )
    .return_(lambda c: ok(c.steps["student"].id)),
)

subscribe = courses.write_handler(
    "student:subscribe",
    courses.pipeline(Subscribe)
    .get_one("course", lambda c: select(Course).where(Course.id == c.payload.course_id))
    .get_one("student", lambda c: select(Student).where(Student.id == c.payload.student_id))
    .find_one(
        "already",
        lambda c: select(Subscription).where(
            Subscription.course_id == c.payload.course_id, Subscription.student_id == c.payload.student_id
        ),
    )
    .guard(
        lambda c: c.steps["already"] is None,
        otherwise=lambda c: fail(
            "unprocessable",
            "the student is already subscribed to this course",
            [{"path": "$.course_id", "message": f"{c.steps['student'].name} holds a seat in it"}],
        ),
    )
    .guard(
        lambda c: c.steps["course"].subscribers < c.steps["course"].capacity,
        otherwise=lambda c: fail(
            "unprocessable",
            "the course is full",
            [{"path": "$.course_id", "message": f"all {c.steps['course'].capacity} seats are taken"}],
        ),
    )
    .guard(
        lambda c: c.steps["student"].subscriptions < MAX_SUBSCRIPTIONS,
        otherwise=lambda c: fail(
            "unprocessable",
            "the student holds too many courses",
            [{"path": "$.student_id", "message": f"at most {MAX_SUBSCRIPTIONS} courses at once"}],
        ),
    )
    .append_event(Course, id=lambda c: c.payload.course_id, event=lambda c: StudentSubscribed(c.payload.student_id))
    .append_event(Student, id=lambda c: c.payload.student_id, event=lambda c: SubscribedToCourse(c.payload.course_id))
    .create(
        "subscription",
        Subscription,
        data=lambda c: Subscription(course_id=c.payload.course_id, student_id=c.payload.student_id),
        event=lambda c: SubscriptionMade(c.payload.course_id, c.payload.student_id),
    )
    # The course read is the row the append projected onto: its seat is taken already.
    .return_(lambda c: ok(c.steps["course"].capacity - c.steps["course"].subscribers)),
)

seats_left = courses.query_handler(
    "course:seats-left",
    courses.query_pipeline(SeatsLeft)
    .get_one("course", lambda c: select(Course).where(Course.id == c.payload.course_id))
    .return_(lambda c: ok(c.steps["course"].capacity - c.steps["course"].subscribers)),
)

courses_of = courses.query_handler(
    "student:courses",
    courses.query_pipeline(CoursesOf)
    .get_one("student", lambda c: select(Student).where(Student.id == c.payload.student_id))
    .find_many(
        "courses",
        lambda c: (
            select(Course)
            .join(Subscription, Subscription.course_id == Course.id)
            .where(Subscription.student_id == c.payload.student_id)
            .order_by(Course.title, Course.id)
        ),
    )
    .return_(lambda c: ok([course.title for course in c.steps["courses"]])),
)
