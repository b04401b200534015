"""The in-process evaluation harness (issue 2, points 7 and 8): the paper's Tables 2, 5 and 6 on
generated scenes, the pre-training of the default student, and the student-inference benchmark."""
